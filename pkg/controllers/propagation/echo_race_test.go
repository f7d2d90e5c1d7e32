package propagation_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
)

// racingWriter, armed, lets the manager's next apply of one copy reach
// the member, and before its answer goes back to the manager writes the
// copy as another field manager, and waits until a watch of the member
// showed that write: the manager's watch sees both writes while its own
// is in flight.
type racingWriter struct {
	t     *testing.T
	next  http.RoundTripper
	path  string
	armed *atomic.Bool
	raced *atomic.Bool
	write func() string // the intruder's write; returns its resourceVersion
	seen  func(rv string)
}

func (r racingWriter) RoundTrip(req *http.Request) (*http.Response, error) {
	apply := req.Method == http.MethodPatch && strings.HasPrefix(req.Header.Get("Content-Type"), "application/apply-patch")
	if !apply || req.URL.Path != r.path || !r.armed.CompareAndSwap(true, false) {
		return r.next.RoundTrip(req)
	}
	resp, err := r.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	r.seen(r.write())
	// The manager's watch of the member is fed by the same server as the
	// test's: a moment more for its event to come before the answer.
	time.Sleep(300 * time.Millisecond)
	r.raced.Store(true)
	return resp, nil
}

// TestWriteByAnotherManagerRacingOursIsCorrected: another field
// manager edits a copy while the manager's own apply of it is in flight
// (after the apply landed, before its answer came): both events come
// while the write is in flight and are held; the write's own version is
// dropped, the other's must still ask for a run, which corrects the
// copy. It fails if a held event of another writer is lost: nothing else
// asks east for a run, and the copy keeps the intruder's value until the
// drift recheck (5 min), far past poll's minute.
func TestWriteByAnotherManagerRacingOursIsCorrected(t *testing.T) {
	t.Parallel()
	f := prepareFleet(t, suite.OwnHubs(t, 1)[0], suite.Name("fleet"), suite.Name("team"))
	var armed, raced atomic.Bool
	watcher, err := client.NewWithWatch(suite.Members[0].Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watcher.Watch(t.Context(), &corev1.ConfigMapList{}, client.InNamespace(f.team))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	intruderWrite := func() string {
		var rv string
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cm := &corev1.ConfigMap{}
			if err := suite.MemberClients[0].Get(t.Context(), types.NamespacedName{Namespace: f.team, Name: "web"}, cm); err != nil {
				return err
			}
			cm.Data["v"] = "hand"
			if err := suite.MemberClients[0].Update(t.Context(), cm, client.FieldOwner("intruder")); err != nil {
				return err
			}
			rv = cm.ResourceVersion
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		return rv
	}
	seen := func(rv string) {
		deadline := time.After(time.Minute)
		for {
			select {
			case e := <-w.ResultChan():
				if e.Type == watch.Modified && e.Object.(*corev1.ConfigMap).ResourceVersion == rv {
					return
				}
			case <-deadline:
				t.Error("the intruder's write was not seen within a minute")
				return
			}
		}
	}
	f.memberTransport = func(member string, next http.RoundTripper) http.RoundTripper {
		if member != "east" {
			return next
		}
		return racingWriter{t: t, next: next, path: "/api/v1/namespaces/" + f.team + "/configmaps/web", armed: &armed, raced: &raced, write: intruderWrite, seen: seen}
	}
	f.start(nil)
	f.register(0, "east", map[string]string{"env": "prod"})
	f.configMap("web", map[string]string{"v": "0"}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitCopy(0, "web", "labelled", func(cm *corev1.ConfigMap) bool {
		return cm != nil && cm.Data["v"] == "0" && cm.Labels[fleetv1alpha1.RevisionLabel] != ""
	})
	for round, v := range []string{"1", "2", "3"} {
		// Past the member runs' revision pace (StatusInterval), the run
		// that sees the change makes its revision and applies once,
		// labelled: no relabelling run comes after it to mask a lost event.
		time.Sleep(propagation.StatusInterval + 500*time.Millisecond)
		armed.Store(true)
		raced.Store(false)
		f.setData("web", v)
		poll.Until(t, "the intruder raced the manager's apply of "+v, raced.Load)
		f.waitCopy(0, "web", "corrected after another manager's write raced the apply of "+v, dataIs("v", v))
		t.Logf("round %d: corrected", round)
	}
}
