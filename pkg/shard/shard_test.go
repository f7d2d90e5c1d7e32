package shard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/membercluster"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/shard"
)

// One hub and three member API servers, each registered under ten names,
// their writes audited.
var suite = &fleettest.Suite{MemberCount: 3, Audit: true}

func TestMain(m *testing.M) {
	if os.Getenv(childReplicaEnv) != "" {
		os.Exit(childReplicaMain())
	}
	os.Exit(suite.Run(m))
}

// quickShard is replica name's part in a test's fleet, with a Lease short
// enough for a test to see it expire, and a renew deadline long enough that
// a hub slowed by other tests on two shared cores does not fence a replica
// the test expects to keep its members (a renewal can wait 4 s for it).
func quickShard(name string) *shard.Options {
	return &shard.Options{Name: name, LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: 250 * time.Millisecond}
}

const (
	memberNames = 30
	slowMember  = "member-02"
	loadNS      = "shard-load"
)

// reconciles records, per member, when each replica reconciled it.
type reconciles struct {
	mu   sync.Mutex
	runs map[string][]run
}

type run struct {
	replica    string
	start, end time.Time
}

func (r *reconciles) reconciler(replica string) fleet.Reconciler {
	return fleet.ReconcilerFunc(func(ctx context.Context, req fleet.Request) (reconcile.Result, error) {
		start := time.Now()
		// A reconcile takes time, and one member's a long time, its
		// reconciler heedless of ctx: a replica that let a member go
		// before its reconcile ended would overlap the next owner's.
		took := 2 * time.Millisecond
		if req.ClusterName == slowMember {
			took = 1500 * time.Millisecond
		}
		time.Sleep(took)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.runs[req.ClusterName] = append(r.runs[req.ClusterName], run{replica: replica, start: start, end: time.Now()})
		return reconcile.Result{}, nil
	})
}

// overlaps lists the members two replicas reconciled at once.
func (r *reconciles) overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for name, runs := range r.runs {
		for i, a := range runs {
			for _, b := range runs[i+1:] {
				if a.replica != b.replica && a.start.Before(b.end) && b.start.Before(a.end) {
					out = append(out, fmt.Sprintf("%s on %s and %s at %s", name, a.replica, b.replica, b.start.Format(time.StampMicro)))
				}
			}
		}
	}
	return out
}

// handoffPause returns the time from the last reconcile of member name by
// replica from to the first by another replica that started after since.
func (r *reconciles) handoffPause(name, from string, since time.Time) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lastOld time.Time
	for _, x := range r.runs[name] {
		if x.replica == from && x.end.After(lastOld) {
			lastOld = x.end
		}
	}
	for _, x := range r.runs[name] {
		if x.replica != from && x.start.After(since) {
			return x.start.Sub(lastOld), true
		}
	}
	return 0, false
}

func (r *reconciles) reconciledBy(name, replica string, since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.runs[name], func(x run) bool { return x.replica == replica && x.start.After(since) })
}

type replicas struct {
	t     *testing.T
	ns    string
	runs  *reconciles
	mu    sync.Mutex
	fleet map[string]*fleettest.Fleet
}

// start starts replica name of the fleet, reaching the hub through cfg
// (nil: directly).
func (rs *replicas) start(name string, cfg *rest.Config) *fleettest.Fleet {
	rs.t.Helper()
	return rs.startWith(cfg, quickShard(name))
}

// startWith starts the replica so describes.
func (rs *replicas) startWith(cfg *rest.Config, so *shard.Options) *fleettest.Fleet {
	rs.t.Helper()
	name := so.Name
	f := suite.StartFleet(rs.t, fleettest.FleetOptions{
		Namespace: rs.ns,
		Config:    cfg,
		Configure: func(o *fleet.Options) {
			o.Shard = so
		},
		Setup: func(m *fleet.Manager) error {
			if err := membercluster.Add(m, membercluster.Options{}); err != nil {
				return err
			}
			return fleet.NewControllerManagedBy(m).Named("load").
				For(&corev1.ConfigMap{}, fleet.WithPredicates(fleettest.InNamespace(loadNS))).
				Complete(rs.runs.reconciler(name))
		},
	})
	rs.mu.Lock()
	rs.fleet[name] = f
	rs.mu.Unlock()
	return f
}

func (rs *replicas) stop(name string) {
	rs.mu.Lock()
	f := rs.fleet[name]
	delete(rs.fleet, name)
	rs.mu.Unlock()
	f.Stop(rs.t)
}

// owners returns, per member, the running replicas that own it.
func (rs *replicas) owners(names []string) map[string][]string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := map[string][]string{}
	for _, n := range names {
		out[n] = nil
		for replica, f := range rs.fleet {
			if f.Manager.Owns(n) {
				out[n] = append(out[n], replica)
			}
		}
		slices.Sort(out[n])
	}
	return out
}

// settled waits until every member is owned by exactly one of the running
// replicas, and its MemberCluster is Ready and names it; it returns each
// member's owner.
func (rs *replicas) settled(names []string) map[string]string {
	rs.t.Helper()
	var owner map[string]string
	poll.Until(rs.t, "every member owned by exactly one replica, Ready", func() bool {
		owner = map[string]string{}
		for n, replicas := range rs.owners(names) {
			if len(replicas) != 1 {
				return false
			}
			owner[n] = replicas[0]
		}
		list := &fleetv1alpha1.MemberClusterList{}
		if err := suite.HubClient.List(rs.t.Context(), list, client.MatchingLabels{fleetv1alpha1.FleetLabel: rs.ns}); err != nil {
			return false
		}
		ready := 0
		for _, mc := range list.Items {
			if o, ok := owner[mc.Name]; ok && mc.Status.Replica == o && mc.Status.State == fleetv1alpha1.MemberStateReady {
				ready++
			}
		}
		return ready == len(names)
	})
	return owner
}

// load updates a ConfigMap in every member API server every 50 ms, so
// that every member name is reconciled all the time, until the test ends.
func load(t *testing.T) {
	for _, c := range suite.MemberClients {
		fleettest.CreateNamespace(t, c, loadNS)
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, c := range suite.MemberClients {
		wg.Go(func() {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: loadNS, Name: "tick"}}
			for n := 0; ctx.Err() == nil; n++ {
				cm.Data = map[string]string{"n": fmt.Sprint(n)}
				err := c.Update(ctx, cm)
				if apierrors.IsNotFound(err) {
					cm.ResourceVersion = ""
					err = c.Create(ctx, cm)
				}
				if err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
					t.Logf("member %d: %v", i, err)
				}
				_ = c.Get(ctx, client.ObjectKeyFromObject(cm), cm)
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		})
	}
}

// TestReplicasShareTheFleet runs three replicas on one hub with thirty
// members: each member is owned and reconciled by exactly one, never by
// two at once, while a fourth joins (only its share moves, all to it), one
// leaves (make-before-break), and one is cut off from the hub (it fences
// itself; the others take over once its Lease expires).
func TestReplicasShareTheFleet(t *testing.T) {
	rs := &replicas{t: t, ns: suite.Name("shard"), runs: &reconciles{runs: map[string][]run{}}, fleet: map[string]*fleettest.Fleet{}}
	cutOff, hubProxy, err := controlplane.ProxyConfig(suite.Hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hubProxy.Close)

	first := rs.start("replica-a", nil)
	rs.start("replica-b", nil)
	rs.start("replica-c", cutOff)
	var names []string
	for i := range memberNames {
		name := fmt.Sprintf("member-%02d", i)
		names = append(names, name)
		first.Register(t, name, suite.Kubeconfigs[i%len(suite.Kubeconfigs)])
	}
	load(t)

	owner := rs.settled(names)
	perReplica := map[string]int{}
	for _, o := range owner {
		perReplica[o]++
	}
	t.Logf("members per replica: %v", perReplica)
	if len(perReplica) != 3 {
		t.Errorf("members are owned by %d replicas, want 3: %v", len(perReplica), perReplica)
	}
	since := time.Now()
	for _, n := range names {
		poll.Until(t, n+" reconciled by its owner", func() bool { return rs.runs.reconciledBy(n, owner[n], since) })
	}
	// Another replica neither reads nor writes through a member it does
	// not own: GetCluster says whose it is.
	for replica, f := range rs.fleet {
		if replica == owner[names[0]] {
			continue
		}
		_, err := f.Manager.GetCluster(t.Context(), names[0])
		if !errors.Is(err, fleet.ErrNotOwned) || !strings.Contains(err.Error(), owner[names[0]]) {
			t.Errorf("%s: GetCluster(%s) = %v, want ErrNotOwned naming %s", replica, names[0], err, owner[names[0]])
		}
	}

	// A fourth replica joins: only its share moves, all of it to it.
	joined := time.Now()
	d := rs.start("replica-d", nil)
	poll.Until(t, "replica-d owns members", func() bool { return slices.ContainsFunc(names, d.Manager.Owns) })
	after := rs.settled(names)
	moved := 0
	for _, n := range names {
		if after[n] == owner[n] {
			continue
		}
		moved++
		if after[n] != "replica-d" {
			t.Errorf("%s moved from %s to %s, not to the replica that joined", n, owner[n], after[n])
		}
		poll.Until(t, n+" reconciled by its new owner", func() bool { return rs.runs.reconciledBy(n, after[n], joined) })
		pause, _ := rs.runs.handoffPause(n, owner[n], joined)
		t.Logf("%s: %s → %s, reconciles paused %s", n, owner[n], after[n], pause)
		waitMovedEvent(t, n, owner[n], after[n])
	}
	t.Logf("%d of %d members moved to the fourth replica", moved, len(names))
	if moved == 0 || moved > len(names)/2 {
		t.Errorf("%d of %d members moved to the fourth replica, want about a quarter", moved, len(names))
	}

	// replica-b leaves (its context ends, as on SIGTERM): its members are
	// handed over, make-before-break.
	owner = after
	left := time.Now()
	rs.stop("replica-b")
	after = rs.settled(names)
	for _, n := range names {
		switch {
		case owner[n] == "replica-b":
			poll.Until(t, n+" reconciled after replica-b left", func() bool { return rs.runs.reconciledBy(n, after[n], left) })
			pause, _ := rs.runs.handoffPause(n, "replica-b", left)
			t.Logf("%s: replica-b → %s, reconciles paused %s", n, after[n], pause)
		case after[n] != owner[n]:
			t.Errorf("%s moved from %s to %s, though replica-b did not own it", n, owner[n], after[n])
		}
	}

	// replica-c is cut off from the hub: it stops every member once its
	// Lease is not renewed for RenewDeadline, and the others take them
	// over once it has not changed for LeaseDuration.
	owner = after
	hubProxy.Down()
	cut := time.Now()
	rs.mu.Lock()
	c := rs.fleet["replica-c"]
	delete(rs.fleet, "replica-c") // it no longer counts as a replica
	rs.mu.Unlock()
	poll.Until(t, "replica-c owns nothing", func() bool {
		return !slices.ContainsFunc(names, c.Manager.Owns)
	})
	after = rs.settled(names)
	for _, n := range names {
		if owner[n] != "replica-c" {
			continue
		}
		poll.Until(t, n+" reconciled after replica-c was cut off", func() bool { return rs.runs.reconciledBy(n, after[n], cut) })
		pause, _ := rs.runs.handoffPause(n, "replica-c", cut)
		t.Logf("%s: replica-c (cut off) → %s, reconciles paused %s", n, after[n], pause)
	}

	if o := rs.runs.overlaps(); len(o) > 0 {
		t.Errorf("members reconciled by two replicas at once:\n%s", strings.Join(o, "\n"))
	}
	counts := map[string]int{}
	rs.runs.mu.Lock()
	for _, runs := range rs.runs.runs {
		for _, x := range runs {
			counts[x.replica]++
		}
	}
	rs.runs.mu.Unlock()
	t.Logf("reconciles per replica: %v", counts)
}

// waitMovedEvent waits for the Event Moved on member name's MemberCluster
// that says it moved from one replica to another.
func waitMovedEvent(t *testing.T, name, from, to string) {
	t.Helper()
	note := fmt.Sprintf("replica %s owns the member (was %s)", to, from)
	poll.Until(t, "Event Moved of "+name, func() bool {
		events := &eventsv1.EventList{}
		if err := suite.HubClient.List(t.Context(), events); err != nil {
			return false
		}
		return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Kind == "MemberCluster" && e.Regarding.Name == name && e.Reason == fleetv1alpha1.ReasonMoved && e.Note == note
		})
	})
}
