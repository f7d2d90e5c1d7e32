package propagation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/internal/words"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/tenancy"
)

// tenancyWait is when a request of a namespaced Propagation is tried
// again while the tenancy mode, or the policies, are being read for the
// first time: nothing is decided before, and nothing is reported either.
const tenancyWait = 200 * time.Millisecond

// tenancyPoll is how often a replica that shares the fleet reads again
// the tenancy modes its peers publish on their Leases.
const tenancyPoll = 250 * time.Millisecond

// tenancyPeers is this replica's part in a fleet shared by replicas
// (shard.Replica): where it publishes its tenancy mode, and reads what
// the others published.
type tenancyPeers interface {
	SetTenancy(mode string)
	Tenancies() map[string]string
}

// tenancyView is what the controller knows of tenancy (see package
// tenancy): the mode, and, where it is enforced, the hub's
// TenancyPolicies and Namespaces, from the manager's cache, whose events
// ask again every Propagation whose reach they may change.
//
// Replicas that share the fleet agree on the mode (tenancy.Agreed): each
// publishes its own on its Lease, and enforces while any live replica
// does; while one has not said, the fleet's mode is in doubt.
//
// Until the mode is known, and, enforced, until both informers have
// synced, the view is pending: namespaced Propagations wait, quietly. A
// read that fails (the manager may not read the identity ConfigMap,
// TenancyPolicies or Namespaces; their CRD is not installed) puts every
// namespace in doubt, with that error, until one succeeds: its
// Propagations are held.
type tenancyView struct {
	flag  string
	fleet string
	live  client.Reader
	cache cache.Cache
	// peers is nil when this replica works alone.
	peers tenancyPeers

	mu sync.Mutex
	// mode is this replica's mode, Enforce or Off once known, "" before;
	// agreed is the fleet's (mode when alone), "" while not known, and
	// disagreed why it is in doubt.
	mode, agreed string
	disagreed    error
	// synced is set once the policies and Namespaces are in the cache.
	synced bool
	// readErr is why the last read failed, nil if none did since the
	// last success.
	readErr error
	// reach is the Reach of the policies in the cache, nil until asked
	// for after a policy event; events counts the policy events.
	reach  *tenancy.Reach
	events uint64
}

// tenancyViewOf is the tenancy view of m's Propagation controller, which
// reads the hub with live.
func tenancyViewOf(m *fleet.Manager, opts Options, live client.Reader) *tenancyView {
	v := &tenancyView{flag: opts.Tenancy, fleet: m.Namespace(), live: live, cache: m.GetCache()}
	if r := m.Replica(); r != nil {
		v.peers = r
	}
	return v
}

// state returns the fleet's mode, whether what it needs is read, and why
// it is in doubt.
func (v *tenancyView) state() (string, bool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.agreed == fleetv1alpha1.TenancyOff:
		return v.agreed, true, nil
	case v.disagreed != nil:
		return v.agreed, false, v.disagreed
	}
	return v.agreed, v.agreed != "" && v.synced, v.readErr
}

// pending reports whether the Propagations of namespace wait for the
// first read of tenancy: a ClusterPropagation never does.
func (v *tenancyView) pending(namespace string) bool {
	if namespace == "" {
		return false
	}
	_, done, err := v.state()
	return !done && err == nil
}

// reachOf is what namespace's Propagations may reach: everything for a
// ClusterPropagation (namespace "", outside tenancy) or where tenancy is
// Off; in doubt while tenancy cannot be read.
func (v *tenancyView) reachOf(ctx context.Context, namespace string) tenancy.NamespaceReach {
	if namespace == "" {
		return tenancy.Everything().For(tenancy.Namespace{})
	}
	mode, done, readErr := v.state()
	switch {
	case mode == fleetv1alpha1.TenancyOff:
		return tenancy.Everything().For(tenancy.Namespace{Name: namespace})
	case readErr != nil:
		return tenancy.Unknown(readErr).For(tenancy.Namespace{Name: namespace})
	case !done:
		return tenancy.Unknown(errors.New("the TenancyPolicies are not read yet")).For(tenancy.Namespace{Name: namespace})
	}
	reach, err := v.policies(ctx)
	if err != nil {
		return tenancy.Unknown(fmt.Errorf("reading the TenancyPolicies: %w", err)).For(tenancy.Namespace{Name: namespace})
	}
	ns := &corev1.Namespace{}
	if err := v.cache.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil && !apierrors.IsNotFound(err) {
		return tenancy.Unknown(fmt.Errorf("reading namespace %s: %w", namespace, err)).For(tenancy.Namespace{Name: namespace})
	}
	return reach.For(tenancy.Namespace{Name: namespace, Labels: ns.Labels})
}

// policies returns the Reach of the policies in the cache, built again
// only after a policy event.
func (v *tenancyView) policies(ctx context.Context) (*tenancy.Reach, error) {
	v.mu.Lock()
	reach, events := v.reach, v.events
	v.mu.Unlock()
	if reach != nil {
		return reach, nil
	}
	var list fleetv1alpha1.TenancyPolicyList
	if err := v.cache.List(ctx, &list); err != nil {
		return nil, err
	}
	reach = tenancy.New(list.Items)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.events == events {
		// No event since the list: it is the cache's latest.
		v.reach = reach
	}
	return reach, nil
}

// run resolves the mode (and, with peers, publishes it and follows
// theirs) and, where tenancy may be enforced, starts reading the
// policies and Namespaces, retrying each read that fails; once done, it
// asks every namespaced Propagation again, and from then on, those of
// each namespace whose reach a change of a policy or of a Namespace's
// labels may change (changed), and all of them when the fleet's mode
// changes. It returns once ctx ends, its handlers removed.
func (v *tenancyView) run(ctx context.Context, fleetID func(context.Context) (string, error), changed func(namespaces []string, all bool)) {
	backoff := func() wait.Backoff {
		return wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 10, Cap: 10 * time.Second}
	}
	retry := func(b *wait.Backoff, err error) bool {
		v.mu.Lock()
		first := v.readErr == nil
		v.readErr = err
		v.mu.Unlock()
		if first {
			changed(nil, true) // held now, and saying why
		}
		select {
		case <-time.After(b.Step()):
			return true
		case <-ctx.Done():
			return false
		}
	}
	mode, err := tenancy.Mode(v.flag, nil)
	if err != nil {
		return // Add refused it
	}
	if v.flag == fleetv1alpha1.TenancyAuto {
		if _, err := fleetID(ctx); err != nil {
			return // ctx ended
		}
		b := backoff()
		for {
			identity := &corev1.ConfigMap{}
			err := v.live.Get(ctx, client.ObjectKey{Namespace: v.fleet, Name: fleetv1alpha1.FleetIdentityName}, identity)
			if err == nil {
				mode, _ = tenancy.Mode(v.flag, identity)
				break
			}
			if !retry(&b, fmt.Errorf("reading the fleet identity ConfigMap %s/%s for the tenancy mode: %w", v.fleet, fleetv1alpha1.FleetIdentityName, err)) {
				return
			}
		}
	}
	v.mu.Lock()
	v.mode, v.readErr = mode, nil
	v.synced = false // an earlier run's handlers are removed
	if v.peers == nil {
		v.agreed = mode
	}
	v.mu.Unlock()
	var following sync.WaitGroup
	defer following.Wait()
	if v.peers != nil {
		v.peers.SetTenancy(mode)
		following.Add(1)
		go func() {
			defer following.Done()
			v.follow(ctx, changed)
		}()
	} else if mode == fleetv1alpha1.TenancyOff {
		changed(nil, true)
		return
	}
	// The manager may not read them, or their CRD is not installed: say
	// so, rather than wait forever for an informer that cannot list.
	b := backoff()
	for {
		err := v.live.List(ctx, &fleetv1alpha1.TenancyPolicyList{}, client.Limit(1))
		if err == nil {
			err = v.live.List(ctx, &corev1.NamespaceList{}, client.Limit(1))
		}
		if err == nil {
			break
		}
		if !retry(&b, fmt.Errorf("reading TenancyPolicies and Namespaces on the hub: %w", err)) {
			return
		}
	}
	policies, err := v.cache.GetInformer(ctx, &fleetv1alpha1.TenancyPolicy{}, cache.BlockUntilSynced(false))
	if err != nil {
		v.fail(err)
		return
	}
	namespaces, err := v.cache.GetInformer(ctx, &corev1.Namespace{}, cache.BlockUntilSynced(false))
	if err != nil {
		v.fail(err)
		return
	}
	policyEvents, err := policies.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { v.policyChanged(ctx, nil, obj, changed) },
		UpdateFunc: func(old, obj any) { v.policyChanged(ctx, old, obj, changed) },
		DeleteFunc: func(obj any) { v.policyChanged(ctx, obj, nil, changed) },
	})
	if err != nil {
		v.fail(err)
		return
	}
	defer func() { _ = policies.RemoveEventHandler(policyEvents) }()
	namespaceEvents, err := namespaces.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			o, okOld := old.(*corev1.Namespace)
			n, ok := obj.(*corev1.Namespace)
			if ok && okOld && !maps.Equal(o.Labels, n.Labels) {
				changed([]string{n.Name}, false)
			}
		},
	})
	if err != nil {
		v.fail(err)
		return
	}
	defer func() { _ = namespaces.RemoveEventHandler(namespaceEvents) }()
	if !toolscache.WaitForCacheSync(ctx.Done(), policies.HasSynced, namespaces.HasSynced, policyEvents.HasSynced) {
		return
	}
	v.mu.Lock()
	v.synced, v.readErr = true, nil // what failed before now reads
	v.mu.Unlock()
	changed(nil, true)
	<-ctx.Done()
}

// follow reads, every tenancyPoll until ctx ends, the modes the fleet's
// replicas publish, and asks every namespaced Propagation again when the
// fleet's mode, or the doubt about it, changes.
func (v *tenancyView) follow(ctx context.Context, changed func([]string, bool)) {
	ticker := time.NewTicker(tenancyPoll)
	defer ticker.Stop()
	for {
		replicas := v.peers.Tenancies()
		v.mu.Lock()
		before, doubtBefore := v.agreed, v.disagreed
		if replicas == nil {
			v.agreed, v.disagreed = "", nil // fenced, or not yet in: pending
		} else {
			v.agreed, v.disagreed = tenancy.Agreed(v.mode, replicas)
		}
		now, doubt := v.agreed, v.disagreed
		v.mu.Unlock()
		if now != before || (doubt == nil) != (doubtBefore == nil) {
			changed(nil, true)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// fail puts every namespace in doubt for err, which no retry cures.
func (v *tenancyView) fail(err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.readErr = fmt.Errorf("watching TenancyPolicies and Namespaces on the hub: %w", err)
}

// policyChanged forgets the Reach built, and asks again the Propagations
// of the namespaces the policy was for before its change (old) or after
// it (obj): all of them when its namespaces selector does not parse.
func (v *tenancyView) policyChanged(ctx context.Context, old, obj any, changed func([]string, bool)) {
	v.mu.Lock()
	v.events++
	v.reach = nil
	synced := v.synced
	v.mu.Unlock()
	if !synced {
		return // the first list: every Propagation is asked once synced
	}
	var namespaces []string
	for _, o := range []any{old, obj} {
		if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = tomb.Obj
		}
		p, ok := o.(*fleetv1alpha1.TenancyPolicy)
		if !ok {
			continue
		}
		names, all := v.namespacesOf(ctx, p)
		if all {
			changed(nil, true)
			return
		}
		namespaces = append(namespaces, names...)
	}
	slices.Sort(namespaces)
	changed(slices.Compact(namespaces), false)
}

// namespacesOf names the namespaces p is for, or reports all when its
// selector does not parse or the Namespaces cannot be listed.
func (v *tenancyView) namespacesOf(ctx context.Context, p *fleetv1alpha1.TenancyPolicy) ([]string, bool) {
	names := slices.Clone(p.Spec.Namespaces.Names)
	if p.Spec.Namespaces.Selector == nil {
		return names, false
	}
	sel, err := p.Spec.Namespaces.Selector.AsSelector()
	if err != nil {
		return nil, true
	}
	var list corev1.NamespaceList
	if err := v.cache.List(ctx, &list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, true
	}
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	return names, false
}

// tenancyChanged asks again, on the hub and in every member, the
// Propagations of namespaces, or every namespaced one.
func (r *reconciler) tenancyChanged(namespaces []string, all bool) {
	ctx := context.Background()
	var props []fleetv1alpha1.Propagation
	if all {
		var err error
		if props, err = r.listPropagations(ctx); err != nil {
			return
		}
	}
	for _, ns := range namespaces {
		in, err := r.propagationsIn(ctx, ns)
		if err != nil {
			return
		}
		props = append(props, in...)
	}
	for i := range props {
		r.queue.add(r.everyCluster(ctx, "", &props[i])...)
	}
}

// tenancyMember is c as a TenancyPolicy selects it: by its name, its
// MemberCluster's labels (its registration's and the fleet's), and the
// source of its accepted registration, as the CLI reads them from the
// MemberCluster (tenancy.MemberOf).
func tenancyMember(c *registry.Cluster, fleet string) tenancy.Member {
	l := maps.Clone(c.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[fleetv1alpha1.FleetLabel] = fleet
	m := tenancy.Member{Name: c.Name, Labels: l}
	if len(c.Claims) > 0 {
		// As the MemberCluster's spec.secretRef says it.
		src := c.Claims[0].Source
		m.Source = tenancy.SourceOf(fleetv1alpha1.SecretReference{Namespace: src.Namespace, Name: src.Name, Format: fleetv1alpha1.RegistrationFormat(src.Format)})
	}
	return m
}

// tenancyUnknown is why the Propagations of a namespace whose reach is in
// doubt are held.
func tenancyUnknown(doubt error) *kindError {
	return &kindError{reason: fleetv1alpha1.ReasonTenancyUnknown, message: "what the namespace may reach is not known, nothing is added or removed: " + doubt.Error()}
}

// enforceTenancy decides whether the Propagation's namespace may reach
// the member: held, when that is in doubt (the run fails TenancyUnknown
// and the member keeps what it holds, as under a members selector that
// does not parse); excluded, when it may not (the member is deselected:
// its copies are removed as the Propagation's rules say). Otherwise
// run.reach is set, for kindAllowed.
func (run *memberRun) enforceTenancy(ctx context.Context) (held, excluded bool) {
	reach := run.env.reachOf(ctx, run.key.Namespace)
	if doubt := reach.Doubt(); doubt != nil {
		run.holdFailed(tenancyUnknown(doubt))
		return true, false
	}
	c, found := run.env.cluster(run.member)
	if !found {
		c = &registry.Cluster{Name: run.member}
	}
	run.Tenant = tenancyMember(c, run.env.Fleet)
	if ok, _ := reach.Reaches(run.Tenant); !ok {
		run.excluded = true
		return false, true
	}
	run.Reach = &reach
	return false, false
}

// setExcluded counts in st the accepted members p's spec.members selects
// that tenancy keeps p's namespace from, and names the first
// MaxListedExcludedMembers of them, by name. While which members are
// selected is not known (a members selector that does not parse, a reach
// in doubt), st keeps what p's status says.
func (r *reconciler) setExcluded(ctx context.Context, p *fleetv1alpha1.Propagation, st *fleetv1alpha1.PropagationStatus) {
	reach := r.tenancy.reachOf(ctx, p.Namespace)
	if reach.Doubt() != nil || membersSelectorError(p) != nil {
		st.Excluded, st.ExcludedMembers = p.Status.Excluded, slices.Clone(p.Status.ExcludedMembers)
		return
	}
	st.Excluded, st.ExcludedMembers = 0, nil
	clusters := r.m.Registry().List()
	slices.SortFunc(clusters, func(a, b *registry.Cluster) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range clusters {
		if !c.Accepted() {
			continue
		}
		if selected, _ := selects(p, c.Name, c.Labels); !selected {
			continue
		}
		ok, why := reach.Reaches(tenancyMember(c, r.fleet))
		if ok {
			continue
		}
		st.Excluded++
		if len(st.ExcludedMembers) < fleetv1alpha1.MaxListedExcludedMembers {
			st.ExcludedMembers = append(st.ExcludedMembers, fleetv1alpha1.ExcludedMember{
				Name: c.Name, Reason: fleetv1alpha1.ReasonNotReachable, Message: words.Truncate(why, fleetv1alpha1.MaxMemberMessageLength),
			})
		}
	}
}

// tellExcluded tells, as one Warning Event on p, the members of this
// replica that tenancy now keeps p from while they held its copies, once
// per exclusion: a member that is reached again and excluded once more is
// told again.
func (r *reconciler) tellExcluded(p *fleetv1alpha1.Propagation) {
	key := client.ObjectKeyFromObject(p)
	var names []string
	for name, res := range r.results.of(key) {
		if res.excluded && res.excludedCopies && !res.excludedTold {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	slices.Sort(names)
	r.recorder.Eventf(hubObject(p), nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonMembersExcluded, "Exclude",
		"tenancy no longer lets namespace %s reach %s (%s): their copies are removed as on a deselection", p.Namespace, words.Plural(len(names), "member", "members"), words.NameList(names))
	r.results.toldExcluded(key, names)
}
