package shard_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/shard"
)

func newReplicas(t *testing.T, prefix string) *replicas {
	return &replicas{t: t, ns: suite.Name(prefix), runs: &reconciles{runs: map[string][]run{}}, fleet: map[string]*fleettest.Fleet{}}
}

// register registers n member names, prefix-00 on, spread over the
// suite's member API servers.
func register(t *testing.T, f *fleettest.Fleet, prefix string, n int) []string {
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		names = append(names, name)
		f.Register(t, name, suite.Kubeconfigs[i%len(suite.Kubeconfigs)])
	}
	return names
}

// leaseTraffic is a replica's road to the hub, which misbehaves with its
// Lease requests only: it stalls each Lease watch stallAfter after it
// opened (0: never), the watch staying open with no event, and answers
// each Lease write delay late (the write itself lands at once).
type leaseTraffic struct {
	stallAfter time.Duration
	delay      atomic.Int64 // nanoseconds
}

func (lt *leaseTraffic) config() *rest.Config {
	cfg := rest.CopyConfig(suite.Hub.Config)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			lease := strings.Contains(req.URL.Path, "/apis/coordination.k8s.io/") && strings.Contains(req.URL.Path, "/leases")
			delay := time.Duration(lt.delay.Load())
			write := lease && (req.Method == http.MethodPut || req.Method == http.MethodPost)
			resp, err := next.RoundTrip(req)
			switch {
			case err != nil || !lease:
			case write && delay > 0:
				select {
				case <-time.After(delay):
				case <-req.Context().Done():
					resp.Body.Close()
					return nil, req.Context().Err()
				}
			case lt.stallAfter > 0 && req.URL.Query().Get("watch") == "true":
				resp.Body = &stalledBody{ReadCloser: resp.Body, until: time.Now().Add(lt.stallAfter), done: req.Context().Done(), closed: make(chan struct{})}
			}
			return resp, err
		})
	})
	return cfg
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// stalledBody passes a watch's events until until, then none: a Read
// blocks until the request ends or the body is closed.
type stalledBody struct {
	io.ReadCloser
	until  time.Time
	done   <-chan struct{}
	closed chan struct{}
	once   sync.Once
}

func (b *stalledBody) Read(p []byte) (int, error) {
	if time.Now().Before(b.until) {
		if n, err := b.ReadCloser.Read(p); time.Now().Before(b.until) {
			return n, err
		}
	}
	select {
	case <-b.done:
	case <-b.closed:
	}
	return 0, io.ErrUnexpectedEOF
}

func (b *stalledBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.ReadCloser.Close()
}

// TestStalledLeaseWatch runs two replicas, replica-b's Lease watches
// stalling 2 s after they open while its writes, renewals included, go
// through. replica-b's cache no longer shows replica-a's renewals, so
// replica-a's Lease looks expired to it; but the hub says otherwise, and
// replica-b's cache does not show its own renewals either: it fences
// itself and renews no more, and replica-a takes every member over. No
// member is ever reconciled by both.
func TestStalledLeaseWatch(t *testing.T) {
	rs := newReplicas(t, "stall")
	stalling := &leaseTraffic{stallAfter: 2 * time.Second}
	a := rs.start("replica-a", nil)
	b := rs.start("replica-b", stalling.config())
	names := register(t, a, "stall", 10)
	load(t)

	var twice []string
	poll.Until(t, "replica-a owns every member, or a member is owned or reconciled by both", func() bool {
		all := true
		for n, owners := range rs.owners(names) {
			if len(owners) > 1 {
				twice = append(twice, fmt.Sprintf("%s owned by %v", n, owners))
			}
			all = all && len(owners) == 1 && owners[0] == "replica-a"
		}
		return all || len(twice) > 0 || len(rs.runs.overlaps()) > 0
	})
	if o := append(twice, rs.runs.overlaps()...); len(o) > 0 {
		t.Fatalf("members owned or reconciled by two replicas at once:\n%s", strings.Join(o, "\n"))
	}
	if !b.Logs.Find("does not show its renewals") {
		t.Errorf("replica-b did not stop renewing; it logged:\n%s", strings.Join(b.Logs.Lines(), "\n"))
	}
	// Every member reconciled by replica-a after the move: replica-b's
	// loop has since seen replica-a's Lease expire (it had for 3 s) and
	// took nothing.
	since := time.Now()
	for _, n := range names {
		poll.Until(t, n+" reconciled by replica-a", func() bool { return rs.runs.reconciledBy(n, "replica-a", since) })
	}
	for n, owners := range rs.owners(names) {
		if len(owners) != 1 || owners[0] != "replica-a" {
			t.Errorf("%s is owned by %v, want replica-a alone", n, owners)
		}
	}
	if o := rs.runs.overlaps(); len(o) > 0 {
		t.Errorf("members reconciled by two replicas at once:\n%s", strings.Join(o, "\n"))
	}
}

// TestSlowHubDoesNotFence runs two replicas whose Lease writes are
// answered 1 s late, four times their RetryPeriod, for longer than their
// renew deadline: the writes land, the caches show them, so neither
// replica fences itself, and no member moves.
func TestSlowHubDoesNotFence(t *testing.T) {
	rs := newReplicas(t, "slowhub")
	slow := &leaseTraffic{}
	options := func(name string) *shard.Options {
		return &shard.Options{Name: name, LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 250 * time.Millisecond}
	}
	a := rs.startWith(slow.config(), options("replica-a"))
	rs.startWith(slow.config(), options("replica-b"))
	names := register(t, a, "slowhub", 6)
	load(t)
	owner := rs.settled(names)

	slow.delay.Store(int64(time.Second))
	slowSince := time.Now()
	// Both Leases renewed on the hub 6 s into the slow hub: each replica
	// has had only slow answers for longer than its renew deadline.
	poll.Until(t, "both Leases renewed 6 s into the slow hub", func() bool {
		for _, name := range []string{"replica-a", "replica-b"} {
			l := &coordinationv1.Lease{}
			if err := suite.HubClient.Get(t.Context(), client.ObjectKey{Namespace: rs.ns, Name: name}, l); err != nil ||
				l.Spec.RenewTime == nil || l.Spec.RenewTime.Time.Before(slowSince.Add(6*time.Second)) {
				return false
			}
		}
		return true
	})
	slow.delay.Store(0)

	for name, f := range rs.fleet {
		if line := f.Logs.First("Fenced"); line != "" {
			t.Errorf("%s fenced itself while its Lease was renewed: %s", name, line)
		}
	}
	for n, owners := range rs.owners(names) {
		if len(owners) != 1 || owners[0] != owner[n] {
			t.Errorf("%s is owned by %v, want %s alone as before", n, owners, owner[n])
		}
	}
	if o := rs.runs.overlaps(); len(o) > 0 {
		t.Errorf("members reconciled by two replicas at once:\n%s", strings.Join(o, "\n"))
	}
}
