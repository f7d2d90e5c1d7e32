package member_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/pkg/member"
)

// TestMemberCacheStreamsItsInitialList: a member's informer fills its
// cache from a watch that sends the initial objects one event at a time
// (client-go's watch-list, sendInitialEvents=true), never from a LIST,
// whose whole response and decoded list would be held at once: with a
// fleet's members engaging together, those lists are the peak of the
// manager's memory.
func TestMemberCacheStreamsItsInitialList(t *testing.T) {
	needEnvtest(t)
	t.Parallel()
	kc := kubeconfig(t, members[0])
	requests := &configMapRequests{}
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{Engage: w.engage, Configure: requests.record})
	ns := fmt.Sprintf("watch-list-%d", time.Now().UnixNano())
	createConfigMap(t, memberClients[0], ns, "one", nil)
	if err := pool.Set(registry.Registration{ClusterName: "watch-list", Kubeconfig: kc}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	for r := w.next(t); r.Name != "one"; r = w.next(t) {
	}
	lists, watchLists := requests.counts()
	if lists != 0 || watchLists == 0 {
		t.Fatalf("the member's cache filled itself with %d LISTs of ConfigMaps and %d watch-lists answered 200, want no LIST and a watch-list", lists, watchLists)
	}
	// The server compresses a watch-list's stream one gzip member per
	// flush, and the member decompresses each itself: an event after the
	// initial ones arrives too.
	if requests.compressedCount() == 0 {
		t.Fatal("no watch-list came compressed: the member's own decompression of watches went untested")
	}
	createConfigMap(t, memberClients[0], ns, "two", nil)
	for r := w.next(t); r.Name != "two"; r = w.next(t) {
	}
}

// TestMemberCacheListsWhenItsServerServesNoWatchList: a member whose API
// server does not serve watch-lists (the WatchList feature off, as some
// distributions and servers before Kubernetes 1.34 run) refuses the
// streaming request, and the member's informer fills its cache from a
// LIST instead: it engages as before.
func TestMemberCacheListsWhenItsServerServesNoWatchList(t *testing.T) {
	needEnvtest(t)
	t.Parallel()
	envs, err := controlplane.StartWithAPIServerFlags(1, map[string]string{"feature-gates": "WatchList=false"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := controlplane.Stop(envs); err != nil {
			t.Error(err)
		}
	})
	direct, err := client.New(envs[0].Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	requests := &configMapRequests{}
	w := newWatcher()
	defer w.queue.ShutDown()
	pool := startPool(t, member.Options{Engage: w.engage, Configure: requests.record})
	createConfigMap(t, direct, "no-watch-list", "one", nil)
	if err := pool.Set(registry.Registration{ClusterName: "no-watch-list", Kubeconfig: kubeconfig(t, envs[0])}); err != nil {
		t.Fatal(err)
	}
	<-w.engaged
	for r := w.next(t); r.Name != "one"; r = w.next(t) {
	}
	if lists, watchLists := requests.counts(); lists == 0 || watchLists != 0 {
		t.Fatalf("the member's cache filled itself with %d LISTs of ConfigMaps and %d watch-lists answered 200, want a LIST and no watch-list", lists, watchLists)
	}
}

// configMapRequests counts a member's requests for ConfigMaps: LISTs, and
// watches asking for the initial objects that the server accepted.
type configMapRequests struct {
	mu                sync.Mutex
	lists, watchLists int
	// compressed counts the watch-lists the server compressed.
	compressed int
}

// record is a member.Options.Configure that has the member's requests
// counted.
func (r *configMapRequests) record(_ string, o *cluster.Options) {
	c := *o.HTTPClient
	c.Transport = recordingTransport{next: c.Transport, requests: r}
	o.HTTPClient = &c
}

func (r *configMapRequests) compressedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.compressed
}

func (r *configMapRequests) counts() (lists, watchLists int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists, r.watchLists
}

type recordingTransport struct {
	next     http.RoundTripper
	requests *configMapRequests
}

func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/configmaps") {
		return resp, err
	}
	q := req.URL.Query()
	t.requests.mu.Lock()
	defer t.requests.mu.Unlock()
	switch {
	case q.Get("watch") != "true":
		t.requests.lists++
	case q.Get("sendInitialEvents") == "true" && err == nil && resp.StatusCode == http.StatusOK:
		t.requests.watchLists++
		if resp.Uncompressed {
			t.requests.compressed++
		}
	}
	return resp, err
}
