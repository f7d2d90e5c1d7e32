package fleettest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// FleetOptions are the differences between the fleets of the tests. The
// zero value is a fleet on the suite's hub, in a fleet namespace of its
// own, started at once, with no controller.
type FleetOptions struct {
	// Hub is the fleet's hub; default the suite's first, Suite.Hub.
	Hub *Hub
	// Namespace is the fleet namespace; default a new one
	// (Suite.FleetNamespace). Several fleets of one test may share one, as
	// replicas of a fleet do.
	Namespace string
	// Config is how the manager reaches the hub; default as the suite's
	// admin, directly.
	Config *rest.Config
	// LeaderElection has the managers of the fleet namespace elect a
	// leader, quickly enough for a test: a leader that stops releases the
	// lease, and the next takes it at its next retry (200 ms). The lease
	// and the renew deadline are the defaults', so that a loaded hub does
	// not end a lead mid-test.
	LeaderElection bool
	// Configure, if set, adjusts the manager's options last.
	Configure func(o *fleet.Options)
	// Setup, if set, adds controllers to the manager before it starts.
	Setup func(m *fleet.Manager) error
	// Deferred leaves the manager not started: the test starts it with
	// Fleet.Start, after adding what must be there from the start.
	Deferred bool
}

// Fleet is a test's fleet manager, on a fleet namespace, and what it
// logged. It is stopped when its test ends.
type Fleet struct {
	// Manager is the fleet's manager.
	Manager *fleet.Manager
	// Namespace is the fleet namespace.
	Namespace string
	// Hub is the fleet's hub.
	Hub *Hub
	// Logs holds the lines the manager logged.
	Logs *Logs

	cancel context.CancelFunc
	done   chan error
	once   sync.Once

	mu      sync.Mutex
	secrets []*corev1.Secret
}

// StartFleet builds a fleet manager with opts and, unless opts.Deferred,
// starts it. When the test ends, the manager is stopped and waited for,
// then the Secrets Register created and the fleet's MemberClusters are
// deleted.
func (s *Suite) StartFleet(t testing.TB, opts FleetOptions) *Fleet {
	t.Helper()
	s.Need(t)
	hub := opts.Hub
	if hub == nil {
		hub = s.Hubs[0]
	}
	ns := opts.Namespace
	if ns == "" {
		ns = s.Name("fleet")
	}
	CreateNamespace(t, hub.Client, ns)
	cfg := opts.Config
	if cfg == nil {
		cfg = hub.Env.Config
	}
	logs := s.Logs.Sub()
	o := fleet.Options{
		Options: manager.Options{
			Logger:                 logs.Logger(),
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Controller:             config.Controller{SkipNameValidation: ptr.To(true), CacheSyncTimeout: 30 * time.Second},
		},
		Namespace: ns,
		// The suite's few API servers stand for many clusters.
		AllowDuplicateClusters: true,
	}
	if opts.LeaderElection {
		o.LeaderElection = true
		o.LeaderElectionID = "fleet-manager-" + ns
		o.LeaderElectionNamespace = ns
		o.RetryPeriod = ptr.To(200 * time.Millisecond)
		o.LeaderElectionReleaseOnCancel = true
	}
	if opts.Configure != nil {
		opts.Configure(&o)
	}
	mgr, err := fleet.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Setup != nil {
		if err := opts.Setup(mgr); err != nil {
			t.Fatal(err)
		}
	}
	f := &Fleet{Manager: mgr, Namespace: ns, Hub: hub, Logs: logs}
	t.Cleanup(func() {
		if t.Failed() {
			f.logTail(t) // before the lines of its stopping
		}
		f.Stop(t)
		f.forget(t)
	})
	if !opts.Deferred {
		f.Start(t)
	}
	return f
}

// failedLogLines is how many of its last log lines a fleet prints when
// its test failed: enough to follow its members through the last
// seconds, where a CI run keeps no other trace.
const failedLogLines = 300

// logTail prints the manager's last log lines.
func (f *Fleet) logTail(t testing.TB) {
	lines := f.Logs.Lines()
	t.Logf("the last %d of %d lines the manager on %s logged:", min(len(lines), failedLogLines), len(lines), f.Namespace)
	for _, l := range lines[max(0, len(lines)-failedLogLines):] {
		t.Log(l)
	}
}

// Start starts the manager of a Deferred fleet.
func (f *Fleet) Start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	f.cancel, f.done = cancel, make(chan error, 1)
	go func() { f.done <- f.Manager.Start(ctx) }()
}

// Stop stops the manager, if it was started, and waits until it has.
// It is called when the test ends; a test may stop it earlier.
func (f *Fleet) Stop(t testing.TB) {
	t.Helper()
	f.once.Do(func() {
		if f.cancel == nil {
			return
		}
		f.cancel()
		select {
		case err := <-f.done:
			if err != nil {
				t.Errorf("manager on %s: %v", f.Namespace, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("manager on %s did not stop", f.Namespace)
		}
	})
}

// forget deletes the Secrets Register created, and the MemberClusters
// labelled with the fleet namespace, which a stopped manager leaves
// behind: they are cluster-scoped and would take their names from a later
// test's fleet.
func (f *Fleet) forget(t testing.TB) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	ctx := context.Background()
	for _, s := range f.secrets {
		if err := client.IgnoreNotFound(f.Hub.Client.Delete(ctx, s)); err != nil {
			t.Errorf("deleting Secret %s/%s: %v", s.Namespace, s.Name, err)
		}
	}
	err := f.Hub.Client.DeleteAllOf(ctx, &fleetv1alpha1.MemberCluster{}, client.MatchingLabels{fleetv1alpha1.FleetLabel: f.Namespace})
	if err != nil {
		t.Errorf("deleting the MemberClusters of fleet %s: %v", f.Namespace, err)
	}
}

// Register registers cluster name in the fleet with a native Secret of
// kubeconfig, carrying the labels given beside the kubeconfig label, and
// returns the Secret.
func (f *Fleet) Register(t testing.TB, name string, kubeconfig []byte, labels ...map[string]string) *corev1.Secret {
	t.Helper()
	l := map[string]string{registry.KubeconfigLabel: "true"}
	for _, extra := range labels {
		maps.Copy(l, extra)
	}
	return f.RegisterSecret(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: name, Labels: l},
		Data:       map[string][]byte{registry.KubeconfigKey: kubeconfig},
	})
}

// RegisterSecret creates s, a registration of any format in any
// namespace, and returns it. It is deleted when the test ends.
func (f *Fleet) RegisterSecret(t testing.TB, s *corev1.Secret) *corev1.Secret {
	t.Helper()
	f.mu.Lock()
	f.secrets = append(f.secrets, s)
	f.mu.Unlock()
	if err := f.Hub.Client.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// WaitEngaged waits until every controller that accepts them has engaged
// the named clusters.
func (f *Fleet) WaitEngaged(t testing.TB, names ...string) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("clusters %v engaged", names), func() bool {
		engaged := f.Manager.ClusterNames()
		for _, n := range names {
			if !slices.Contains(engaged, n) {
				return false
			}
			for _, e := range f.Manager.Engagements(n) {
				if !e.Engaged {
					return false
				}
			}
		}
		return true
	})
}

// WaitState waits until member name is in state want.
func (f *Fleet) WaitState(t testing.TB, name string, want fleetv1alpha1.MemberState) {
	t.Helper()
	poll.Until(t, name+" "+string(want), func() bool {
		got, _ := f.Manager.MemberState(name)
		return got == want
	})
}

// WaitSynced waits until the fleet's registry has read every
// registration once.
func (f *Fleet) WaitSynced(t testing.TB) {
	t.Helper()
	poll.Until(t, "the registry synced", func() bool {
		select {
		case <-f.Manager.Registry().Synced():
			return true
		default:
			return false
		}
	})
}

// Elected reports whether the fleet's manager leads.
func (f *Fleet) Elected() bool {
	select {
	case <-f.Manager.Elected():
		return true
	default:
		return false
	}
}

// WaitWarning waits for a Warning Event with reason about the Secret
// secretName of the fleet namespace.
func (f *Fleet) WaitWarning(t testing.TB, secretName, reason string) {
	t.Helper()
	poll.Until(t, reason+" reported on Secret "+secretName, func() bool {
		events := &eventsv1.EventList{}
		if err := f.Hub.Client.List(t.Context(), events, client.InNamespace(f.Namespace)); err != nil {
			return false
		}
		return slices.ContainsFunc(events.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == secretName && e.Reason == reason && e.Type == corev1.EventTypeWarning
		})
	})
}

// WatchConfigMaps adds controller name, which reconciles with r the
// ConfigMaps of namespace ns in clusters.
func (f *Fleet) WatchConfigMaps(t testing.TB, name, ns string, clusters fleet.Clusters, r fleet.Reconciler) {
	t.Helper()
	err := fleet.NewControllerManagedBy(f.Manager).
		Named(name).
		For(&corev1.ConfigMap{}, fleet.WithPredicates(InNamespace(ns))).
		WatchClusters(clusters).
		Complete(r)
	if err != nil {
		t.Fatal(err)
	}
}
