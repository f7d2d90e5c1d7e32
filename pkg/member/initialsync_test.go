package member_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/member"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// TestStalledMembersDoNotHoldUpAnothersInitialSync: the members' caches
// fill a few at a time, but a member whose server never answers its
// initial list or watch (accepted, then silent, as a frozen server is)
// gives its turn back after a short bound. Eight such members, more than
// fill at once, start first; a member that answers, registered while
// they wait, still fills its cache and is reconciled within seconds. Not
// parallel: envtest's AddUser (kubeconfig) is not safe for concurrent use
// on one server, and the watch-list test makes one of members[0] too.
func TestStalledMembersDoNotHoldUpAnothersInitialSync(t *testing.T) {
	needEnvtest(t)
	kc := kubeconfig(t, members[0])
	var stalled atomic.Int32
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{
		Engage:                 w.engage,
		AllowDuplicateClusters: true,
		Configure: func(name string, o *cluster.Options) {
			if strings.HasPrefix(name, "stalled-") {
				c := *o.HTTPClient
				c.Transport = stallingTransport{next: c.Transport, stalled: &stalled}
				o.HTTPClient = &c
			}
		},
	})
	ns := fmt.Sprintf("stalled-%d", time.Now().UnixNano())
	createConfigMap(t, memberClients[0], ns, "answered", nil)
	for i := range 8 {
		if err := pool.Set(registry.Registration{ClusterName: fmt.Sprintf("stalled-%d", i), Kubeconfig: kc}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, "stalled members' initial requests sent", func() bool { return stalled.Load() > 0 })
	start := time.Now()
	if err := pool.Set(registry.Registration{ClusterName: "answering", Kubeconfig: kc}); err != nil {
		t.Fatal(err)
	}
	for r := w.next(t); r.ClusterName != "answering" || r.Name != "answered"; r = w.next(t) {
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the answering member was reconciled %s after it was registered behind %d stalled members, want within seconds", took, stalled.Load())
	}
	t.Logf("reconciled %s after registration, behind %d stalled initial requests", time.Since(start), stalled.Load())
}

// stallingTransport holds a member's initial requests for ConfigMaps (a
// LIST, or a watch asking for the initial objects) unanswered until they
// are cancelled, as a frozen server holds them.
type stallingTransport struct {
	next    http.RoundTripper
	stalled *atomic.Int32
}

func (t stallingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	initial := q.Get("watch") != "true" || q.Get("sendInitialEvents") == "true"
	if req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/configmaps") || !initial {
		return t.next.RoundTrip(req)
	}
	t.stalled.Add(1)
	<-req.Context().Done()
	return nil, req.Context().Err()
}
