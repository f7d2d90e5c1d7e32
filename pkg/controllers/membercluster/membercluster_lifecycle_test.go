package membercluster_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// readyFor waits until MemberCluster name is Ready, with controller the
// only engaged controller: only the manager that runs it can write that.
func readyFor(t *testing.T, name, controller string) *fleetv1alpha1.MemberCluster {
	t.Helper()
	return suite.WaitMemberCluster(t, name, "Ready with "+controller+" engaged", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateReady && fleettest.Condition(mc, fleetv1alpha1.ConditionReady) == metav1.ConditionTrue &&
			slices.Equal(mc.Status.EngagedControllers, []string{controller})
	})
}

// mcObserver watches every MemberCluster of the hub from one resource
// version on, and remembers what happened to the ones it was asked about:
// each UID seen, each creation and deletion, and each fleet label.
type mcObserver struct {
	names  []string
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	uids    map[string][]types.UID
	created map[string]int
	deleted map[string]int
	fleets  map[string][]string
	err     error
}

// observeMemberClusters starts watching the named MemberClusters, which
// must exist.
func observeMemberClusters(t *testing.T, names ...string) *mcObserver {
	t.Helper()
	wc, err := client.NewWithWatch(suite.Hub.Config, client.Options{Scheme: suite.HubClient.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	list := &fleetv1alpha1.MemberClusterList{}
	if err := wc.List(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	o := &mcObserver{
		names: names, done: make(chan struct{}),
		uids: map[string][]types.UID{}, created: map[string]int{}, deleted: map[string]int{}, fleets: map[string][]string{},
	}
	for i := range list.Items {
		o.record(watch.Bookmark, &list.Items[i]) // as found: neither created nor deleted
	}
	for _, name := range names {
		if len(o.uids[name]) == 0 {
			t.Fatalf("MemberCluster %s does not exist when the observation starts", name)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	o.cancel = cancel
	go func() {
		defer close(o.done)
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			w, err := wc.Watch(ctx, &fleetv1alpha1.MemberClusterList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err != nil {
				if ctx.Err() == nil {
					o.fail(fmt.Errorf("watching MemberClusters: %w", err))
				}
				return
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if ctx.Err() != nil {
						break // the watch ends with the observation
					}
					o.fail(fmt.Errorf("watching MemberClusters: %v", apierrors.FromObject(ev.Object)))
					w.Stop()
					return
				}
				mc, ok := ev.Object.(*fleetv1alpha1.MemberCluster)
				if !ok {
					continue
				}
				rv = mc.ResourceVersion
				o.record(ev.Type, mc)
			}
			w.Stop()
		}
	}()
	return o
}

func (o *mcObserver) fail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err == nil {
		o.err = err
	}
}

func (o *mcObserver) record(event watch.EventType, mc *fleetv1alpha1.MemberCluster) {
	if !slices.Contains(o.names, mc.Name) {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if uids := o.uids[mc.Name]; len(uids) == 0 || uids[len(uids)-1] != mc.UID {
		o.uids[mc.Name] = append(uids, mc.UID)
	}
	if fleets := o.fleets[mc.Name]; len(fleets) == 0 || fleets[len(fleets)-1] != mc.Labels[fleetv1alpha1.FleetLabel] {
		o.fleets[mc.Name] = append(fleets, mc.Labels[fleetv1alpha1.FleetLabel])
	}
	switch event {
	case watch.Added:
		o.created[mc.Name]++
	case watch.Deleted:
		o.deleted[mc.Name]++
	}
}

// check stops the observation and fails unless each MemberCluster of want
// was neither deleted nor created, kept its UID and always carried the
// fleet label want gives it.
func (o *mcObserver) check(t *testing.T, want map[string]string) {
	t.Helper()
	o.cancel()
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		t.Fatal(o.err)
	}
	for name, fleetNS := range want {
		if o.deleted[name] > 0 || o.created[name] > 0 || len(o.uids[name]) != 1 {
			t.Errorf("MemberCluster %s was deleted %d times and created %d times; UIDs seen %v", name, o.deleted[name], o.created[name], o.uids[name])
		}
		if fleets := o.fleets[name]; !slices.Equal(fleets, []string{fleetNS}) {
			if len(fleets) > 6 {
				fleets = append(fleets[:6:6], fmt.Sprintf("... (%d changes in all)", len(fleets)))
			}
			t.Errorf("MemberCluster %s carried fleet labels %q, want only %q", name, fleets, fleetNS)
		}
	}
}

// keptHistory fails unless after is before's object, still holding the
// state transitions before recorded, in order, and its StateSince is its
// last transition's time.
func keptHistory(t *testing.T, before, after *fleetv1alpha1.MemberCluster) {
	t.Helper()
	if after.UID != before.UID || !after.CreationTimestamp.Equal(&before.CreationTimestamp) {
		t.Fatalf("MemberCluster %s was recreated: UID %s created %s, was UID %s created %s", before.Name, after.UID, after.CreationTimestamp, before.UID, before.CreationTimestamp)
	}
	old, cur := before.Status.RecentTransitions, after.Status.RecentTransitions
	if len(old) == 0 {
		t.Fatalf("MemberCluster %s had no transitions before", before.Name)
	}
	// New transitions are appended, and beyond MaxRecentTransitions the
	// oldest are dropped: cur starts with what is left of old.
	same := func(a, b fleetv1alpha1.StateTransition) bool {
		return a.State == b.State && a.Reason == b.Reason && a.Time.Equal(&b.Time)
	}
	kept := false
	for d := range old {
		rest := old[d:]
		kept = kept || len(cur) >= len(rest) && slices.EqualFunc(cur[:len(rest)], rest, same)
	}
	if !kept {
		t.Fatalf("MemberCluster %s lost its transitions: had %+v, has %+v", before.Name, old, cur)
	}
	if last := cur[len(cur)-1]; after.Status.StateSince == nil || !after.Status.StateSince.Equal(&last.Time) || last.State != after.Status.State {
		t.Fatalf("MemberCluster %s is %s since %v, but its last transition is %+v", before.Name, after.Status.State, after.Status.StateSince, last)
	}
	if before.Status.StateSince == nil || after.Status.StateSince.Before(before.Status.StateSince) {
		t.Fatalf("MemberCluster %s is in its state since %v, before %v", before.Name, after.Status.StateSince, before.Status.StateSince)
	}
}

// slowArgoCD reads Argo CD's cluster Secrets in namespace like
// registry.ArgoCDFormat, each read taking delay: a registration source
// that is slow to pass over its Secrets, so that a manager's first pass
// ends well after its MemberCluster controller has started.
func slowArgoCD(namespace string, delay time.Duration) registry.Format {
	f := registry.ArgoCDFormat(namespace)
	read := f.Read
	f.Read = func(s *corev1.Secret) (registry.Registration, error) {
		time.Sleep(delay)
		return read(s)
	}
	return f
}

// slowRead is how long the slow format takes to read a Secret: long
// enough that a manager starting on a loaded machine runs its controllers
// before its registry has synced.
const slowRead = 3 * time.Second

// mclFleetOptions is the fleet of the restart and handoff tests: native
// registrations, and Argo CD ones in argoNS, read with delay each.
func mclFleetOptions(argoNS string, delay time.Duration) func(o *fleet.Options) {
	return func(o *fleet.Options) {
		o.SecretFormats = []registry.Format{slowArgoCD(argoNS, delay)}
	}
}

// TestLeaderHandoffKeepsMemberClusters hands the lead over to a manager
// that has just started, whose registry has not read every registration
// yet: it must not delete the MemberClusters of the ones it has not read.
func TestLeaderHandoffKeepsMemberClusters(t *testing.T) {
	t.Parallel()
	names := []string{"lh-native", "lh-argo"}
	ns := suite.FleetNamespace(t)
	argoNS := ns + "-argocd"
	fleettest.CreateNamespace(t, suite.HubClient, argoNS)
	first := suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Setup: memberClusters, LeaderElection: true, Configure: mclFleetOptions(argoNS, 0), Deferred: true})
	// Only the manager that runs it writes its controller's name into the
	// status: that tells who wrote last.
	first.WatchConfigMaps(t, "lh-first", "lh-first", fleet.Members, &fleettest.Recorder{})
	first.Start(t)
	poll.Until(t, "the first manager elected", func() bool { return first.Elected() })

	first.Register(t, "lh-native", suite.Kubeconfigs[0])
	first.RegisterSecret(t, fleettest.ArgoCDSecret(t, argoNS, "lh-argo", suite.Kubeconfigs[1]))
	before := map[string]*fleetv1alpha1.MemberCluster{}
	for _, name := range names {
		before[name] = readyFor(t, name, "lh-first")
		if before[name].Labels[fleetv1alpha1.FleetLabel] != ns {
			t.Fatalf("MemberCluster %s has fleet label %q, want %q", name, before[name].Labels[fleetv1alpha1.FleetLabel], ns)
		}
	}
	o := observeMemberClusters(t, names...)

	second := suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Setup: memberClusters, LeaderElection: true, Configure: mclFleetOptions(argoNS, slowRead), Deferred: true})
	second.WatchConfigMaps(t, "lh-second", "lh-second", fleet.Members, &fleettest.Recorder{})
	syncedWhenElected := make(chan bool, 1)
	go func() {
		select {
		case <-second.Manager.Elected():
			select {
			case <-second.Manager.Registry().Synced():
				syncedWhenElected <- true
			default:
				syncedWhenElected <- false
			}
		case <-t.Context().Done():
		}
	}()
	second.Start(t)
	// Its native registrations read, the second manager has synced its
	// caches and runs for election.
	poll.Until(t, "the second manager's registry has lh-native", func() bool {
		_, ok := second.Manager.Registry().Get("lh-native")
		return ok
	})
	if second.Elected() {
		t.Fatal("both managers lead")
	}
	first.Stop(t)
	poll.Until(t, "the second manager elected", func() bool { return second.Elected() })
	if <-syncedWhenElected {
		t.Fatal("the second manager read every registration before it led: the handoff tested nothing; make slowRead longer")
	}
	second.WaitEngaged(t, names...)
	for _, name := range names {
		readyFor(t, name, "lh-second")
	}
	// Long enough for a late cleanup to show.
	time.Sleep(time.Second)
	o.check(t, map[string]string{"lh-native": ns, "lh-argo": ns})
	for _, name := range names {
		keptHistory(t, before[name], suite.WaitMemberCluster(t, name, "still Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
			return mc.Status.State == fleetv1alpha1.MemberStateReady
		}))
	}
}

// TestRestartKeepsMemberClusters starts a manager over the MemberClusters
// of one that stopped: it must not delete those of registrations it has
// not read yet.
func TestRestartKeepsMemberClusters(t *testing.T) {
	t.Parallel()
	names := []string{"rs-a", "rs-b", "rs-argo"}
	ns := suite.FleetNamespace(t)
	argoNS := ns + "-argocd"
	fleettest.CreateNamespace(t, suite.HubClient, argoNS)
	first := suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Setup: memberClusters, Configure: mclFleetOptions(argoNS, 0), Deferred: true})
	first.WatchConfigMaps(t, "rs-first", "rs-first", fleet.Members, &fleettest.Recorder{})
	first.Start(t)
	first.Register(t, "rs-a", suite.Kubeconfigs[0])
	first.Register(t, "rs-b", suite.Kubeconfigs[1])
	first.RegisterSecret(t, fleettest.ArgoCDSecret(t, argoNS, "rs-argo", suite.Kubeconfigs[0]))
	before := map[string]*fleetv1alpha1.MemberCluster{}
	for _, name := range names {
		before[name] = readyFor(t, name, "rs-first")
	}

	o := observeMemberClusters(t, names...)
	first.Stop(t)
	second := suite.StartFleet(t, fleettest.FleetOptions{Namespace: ns, Setup: memberClusters, Configure: mclFleetOptions(argoNS, slowRead), Deferred: true})
	second.WatchConfigMaps(t, "rs-second", "rs-second", fleet.Members, &fleettest.Recorder{})
	second.Start(t)
	second.WaitEngaged(t, names...)
	for _, name := range names {
		readyFor(t, name, "rs-second")
	}
	time.Sleep(time.Second)
	want := map[string]string{}
	for _, name := range names {
		want[name] = ns
	}
	o.check(t, want)
	for _, name := range names {
		keptHistory(t, before[name], suite.WaitMemberCluster(t, name, "Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
			return mc.Status.State == fleetv1alpha1.MemberStateReady
		}))
	}
}

func TestTwoFleetsOnOneHub(t *testing.T) {
	t.Parallel()
	a := suite.StartFleet(t, fleettest.FleetOptions{Namespace: suite.FleetNamespace(t), Setup: memberClusters, Deferred: true})
	a.WatchConfigMaps(t, "tf-in-a", "tf-in-a", fleet.Members, &fleettest.Recorder{})
	a.Start(t)
	a.Register(t, "tf-a", suite.Kubeconfigs[0])
	a.Register(t, "tf-shared", suite.Kubeconfigs[0])
	readyFor(t, "tf-a", "tf-in-a")
	readyFor(t, "tf-shared", "tf-in-a")
	o := observeMemberClusters(t, "tf-a", "tf-shared")

	// Fleet b starts over a's MemberClusters: neither name is registered
	// in b when it starts.
	b := suite.StartFleet(t, fleettest.FleetOptions{Namespace: suite.FleetNamespace(t), Setup: memberClusters, Deferred: true})
	b.WatchConfigMaps(t, "tf-in-b", "tf-in-b", fleet.Members, &fleettest.Recorder{})
	b.Start(t)
	b.Register(t, "tf-b", suite.Kubeconfigs[1])
	readyFor(t, "tf-b", "tf-in-b")
	ob := observeMemberClusters(t, "tf-b")
	// And b registers a name a keeps the MemberCluster of.
	b.Register(t, "tf-shared", suite.Kubeconfigs[1])
	b.WaitEngaged(t, "tf-shared")

	time.Sleep(3 * time.Second)
	o.check(t, map[string]string{"tf-a": a.Namespace, "tf-shared": a.Namespace})
	ob.check(t, map[string]string{"tf-b": b.Namespace})
	if !b.Logs.Find("A MemberCluster of another fleet has this cluster's name", `"cluster"="tf-shared"`) {
		t.Error("fleet b did not say why it leaves MemberCluster tf-shared alone")
	}
	for name, f := range map[string]*fleettest.Fleet{"tf-a": a, "tf-shared": a, "tf-b": b} {
		mc := &fleetv1alpha1.MemberCluster{}
		if err := suite.HubClient.Get(t.Context(), types.NamespacedName{Name: name}, mc); err != nil {
			t.Fatalf("MemberCluster %s: %v", name, err)
		}
		if mc.Labels[fleetv1alpha1.FleetLabel] != f.Namespace || mc.Spec.SecretRef.Namespace != f.Namespace {
			t.Errorf("MemberCluster %s has fleet label %q and Secret %s/%s; want fleet %s's", name, mc.Labels[fleetv1alpha1.FleetLabel], mc.Spec.SecretRef.Namespace, mc.Spec.SecretRef.Name, f.Namespace)
		}
	}
}

func TestUnreadableSecretKeepsItsMemberCluster(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Namespace: suite.FleetNamespace(t), Setup: memberClusters, Deferred: true})
	f.Start(t)
	s := f.RegisterSecret(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.Namespace, Name: "ur-member", Labels: map[string]string{registry.KubeconfigLabel: "true"}},
		Data:       map[string][]byte{"config": suite.Kubeconfigs[0]}, // not under "kubeconfig"
	})
	mc := suite.WaitMemberCluster(t, "ur-member", "refused", func(mc *fleetv1alpha1.MemberCluster) bool {
		return fleettest.Condition(mc, fleetv1alpha1.ConditionCredentialsAccepted) == metav1.ConditionFalse
	})
	accepted := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsAccepted)
	if accepted.Reason != "MissingKubeconfig" || fleettest.Condition(mc, fleetv1alpha1.ConditionReady) != metav1.ConditionFalse || mc.Labels[fleetv1alpha1.FleetLabel] != f.Namespace {
		t.Fatalf("MemberCluster ur-member has labels %v and conditions %+v; want fleet %s, CredentialsAccepted False for MissingKubeconfig, and not Ready",
			mc.Labels, mc.Status.Conditions, f.Namespace)
	}
	o := observeMemberClusters(t, "ur-member")

	s.Data = map[string][]byte{registry.KubeconfigKey: suite.Kubeconfigs[0]}
	if err := suite.HubClient.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	f.WaitEngaged(t, "ur-member")
	suite.WaitMemberCluster(t, "ur-member", "Ready", func(mc *fleetv1alpha1.MemberCluster) bool {
		return mc.Status.State == fleetv1alpha1.MemberStateReady && fleettest.Condition(mc, fleetv1alpha1.ConditionCredentialsAccepted) == metav1.ConditionTrue
	})
	o.check(t, map[string]string{"ur-member": f.Namespace})
}

// refusedKubeconfig is kubeconfig with TLS verification turned off, which
// the default policy refuses.
func refusedKubeconfig(t *testing.T, kubeconfig []byte) []byte {
	t.Helper()
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	server := raw.Clusters[raw.Contexts[raw.CurrentContext].Cluster]
	server.InsecureSkipTLSVerify, server.CertificateAuthorityData = true, nil
	out, err := clientcmd.Write(*raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRefusedMemberLeavesNoMetrics(t *testing.T) {
	t.Parallel()
	f := suite.StartFleet(t, fleettest.FleetOptions{Namespace: suite.FleetNamespace(t), Setup: memberClusters, Configure: fleettest.QuickHealth, Deferred: true})
	r := &fleettest.Recorder{}
	f.WatchConfigMaps(t, "rm-metered", "rm-metered", fleet.Members, r)
	f.Start(t)
	s := f.Register(t, "rm-member", suite.Kubeconfigs[1])
	fleettest.CreateConfigMap(t, suite.MemberClients[1], "rm-metered", "counted-"+f.Namespace)
	r.WaitFor(t, fleettest.Request("rm-member", "rm-metered", "counted-"+f.Namespace))
	readyFor(t, "rm-member", "rm-metered")
	poll.Until(t, "fleet_member_ready{cluster=rm-member} 1 and its probe and reconcile series", func() bool {
		series := fleettest.Series(t, "rm-member")
		ready := series["fleet_member_ready"]
		return len(ready) == 1 && ready[0].GetGauge().GetValue() == 1 &&
			len(series["fleet_member_probes_total"]) > 0 && len(series["fleet_reconciles_total"]) > 0
	})

	s.Data[registry.KubeconfigKey] = refusedKubeconfig(t, suite.Kubeconfigs[1])
	if err := suite.HubClient.Update(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	mc := suite.WaitMemberCluster(t, "rm-member", "refused", func(mc *fleetv1alpha1.MemberCluster) bool {
		return fleettest.Condition(mc, fleetv1alpha1.ConditionCredentialsAccepted) == metav1.ConditionFalse
	})
	if c := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsAccepted); c.Reason != "InsecureTLSRefused" {
		t.Fatalf("CredentialsAccepted is False for %s, want InsecureTLSRefused", c.Reason)
	}
	poll.Until(t, "no series of rm-member", func() bool { return len(fleettest.Series(t, "rm-member")) == 0 })
	// And none comes back from a probe or a reconcile still under way.
	time.Sleep(time.Second)
	if series := fleettest.Series(t, "rm-member"); len(series) != 0 {
		t.Fatalf("series of the refused member came back: %v", slices.Sorted(maps.Keys(series)))
	}
}
