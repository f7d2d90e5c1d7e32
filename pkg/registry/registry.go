package registry

import (
	"cmp"
	"context"
	"crypto/sha256"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// ReasonClusterNameConflict refuses a name that two or more Secrets, or
// ClusterProfiles, claim.
const ReasonClusterNameConflict = "ClusterNameConflict"

// ReasonClusterNameTaken refuses a registration from outside the fleet
// namespace whose name a Secret of the fleet namespace claims.
const ReasonClusterNameTaken = "ClusterNameTaken"

// Source names one registration: a Secret read in one format, or a
// ClusterProfile.
type Source struct {
	Format string
	types.NamespacedName
}

func (s Source) String() string { return s.Format + ":" + s.NamespacedName.String() }

// object names the object the source reads: its kind and key.
func (s Source) object() string {
	if s.Format == ClusterProfileFormat {
		return "ClusterProfile " + s.NamespacedName.String()
	}
	return "Secret " + s.NamespacedName.String()
}

// Claim is one source's claim on a cluster name.
type Claim struct {
	Source Source
	// Labels are the Secret's labels: the cluster's labels while this
	// claim is the one accepted.
	Labels map[string]string
	// Refusal says why the Secret could not be read; nil if it could.
	Refusal *kubeconfig.RefusedError
	// Created is when the Secret, or ClusterProfile, was created: of two
	// names that register one cluster, the first created keeps it.
	Created time.Time
	// Version is the resourceVersion of the Secret, or ClusterProfile,
	// as read.
	Version string

	kubeconfig []byte
	// fingerprint is the hash of kubeconfig, as ProbeResult.Kubeconfig.
	fingerprint [sha256.Size]byte
}

// Cluster is what the registry knows of one cluster name. A Cluster handed
// out is a snapshot: the registry never changes it.
type Cluster struct {
	Name string
	// Claims are the sources that claim the name, sorted by format
	// preference, then Secret. When a Secret of the fleet namespace claims
	// the name, they are only the fleet namespace's Secrets.
	Claims []Claim
	// Labels are the accepted claim's labels.
	Labels map[string]string
	// Refusal says why no member runs for the name: a conflict between
	// Secrets, a Secret that could not be read, a kubeconfig that the
	// policy or the member pool refused, or a cluster that another name
	// keeps (DuplicateOf). Nil when the name is accepted.
	Refusal *kubeconfig.RefusedError
	// ClusterID identifies the cluster the name's kubeconfig reaches, as
	// its member reported it (see Identify), or else as the hub's
	// MemberCluster records it (see Record); empty while unknown.
	ClusterID string
	// DuplicateOf names the name that keeps the cluster, when it is not
	// this one: this name is refused as ReasonDuplicateCluster.
	DuplicateOf string
	// State is the member's state; empty while refused.
	State fleetv1alpha1.MemberState
	// Probe is the member's last probe, nil before the first.
	Probe *ProbeResult
	// ProbedVersion is the Version of the accepted claim as of the last
	// probe that reviewed the credentials of its kubeconfig; empty before
	// one did in this process.
	ProbedVersion string
	// Owner names the replica that owns the cluster when replicas share
	// the fleet; empty when this replica works alone, or while no replica
	// is live.
	Owner string
	// Ownership is what this replica does for the cluster: Owned when it
	// works alone.
	Ownership Ownership

	// generation numbers the name's accepted registration, so that a
	// refusal of an older kubeconfig is not pinned on a newer one, and a
	// subscriber tells a new kubeconfig from the one it has. It is the
	// registry's, never repeated (see Registry.generations).
	generation int64
	// taken are the claims from outside the fleet namespace on a name a
	// Secret of the fleet namespace claims: they change nothing, until
	// the fleet namespace's claims go.
	taken []Claim
	// reported is true once ClusterID is the report of this process's
	// member for the current kubeconfig; unrecorded, once the kubeconfig
	// changed in this process, so that the hub's record no longer applies.
	reported, unrecorded bool
}

// Accepted reports whether a member should run for the cluster.
func (c *Cluster) Accepted() bool { return c.Refusal == nil && len(c.Claims) > 0 }

// RunsHere reports whether a member should run for the cluster on this
// replica: it is accepted, and owned here or coming here.
func (c *Cluster) RunsHere() bool { return c.Accepted() && c.Ownership != NotOwned }

// Owned reports whether this replica does the cluster's work.
func (c *Cluster) Owned() bool { return c.Ownership == Owned }

// Ownership is what this replica does for a cluster when replicas share
// the fleet (package shard assigns it).
type Ownership string

const (
	// Owned: this replica runs the member and does all of its work. The
	// zero value: a replica that works alone owns every cluster.
	Owned Ownership = ""
	// Incoming: this replica owns the cluster from the next handoff on.
	// Its member runs and its caches sync, its work held, until the
	// previous owner has let it go.
	Incoming Ownership = "Incoming"
	// NotOwned: another replica owns the cluster; nothing of its member
	// runs here.
	NotOwned Ownership = "NotOwned"
)

// Registration returns the accepted claim's registration and its
// generation, for Refuse; false when the cluster is refused.
func (c *Cluster) Registration() (Registration, int64, bool) {
	if !c.Accepted() {
		return Registration{}, 0, false
	}
	return Registration{ClusterName: c.Name, Kubeconfig: c.Claims[0].kubeconfig}, c.generation, true
}

// Registry owns every registered cluster name: its claims, its refusal,
// its labels and its member's state. Writers are the registration sources
// (claims), the member pool (state) and whoever builds members (Refuse).
// Readers subscribe (see Subscribe) or read a snapshot with Get and List.
//
// The registry never calls out while holding its lock, and never calls a
// subscriber at all: subscribers pull.
type Registry struct {
	formats []string
	// fleetNamespace names clusters: a claim from elsewhere never takes a
	// name one of its Secrets claims. Empty: no claim is the fleet's.
	fleetNamespace string
	// shared is true when replicas share the fleet: a new name is
	// NotOwned until Assign says otherwise.
	shared bool
	// allowDuplicates refuses no name as another's duplicate, whatever
	// its member or the hub's records say of its cluster.
	allowDuplicates bool

	// mu guards everything below.
	mu       sync.Mutex
	clusters map[string]*Cluster
	// recorded are the identities the hub's MemberClusters record, by
	// name (see Record).
	recorded map[string]string
	// claimed maps each source to the name it claims.
	claimed map[Source]string
	// generations is the last generation given, to any name: one removed
	// and registered again does not start over, so a subscriber that sees
	// both in one event tells them apart.
	generations int64
	subs        map[*Subscription]struct{}
	// unsynced are the formats whose first pass has not ended.
	unsynced map[string]struct{}
	synced   chan struct{}
}

// New returns an empty registry for sources of the named formats, in
// order of preference: when one Secret is read by two formats, the first
// one's reading wins. Synced waits for every one of them. This replica
// owns every cluster.
func New(formats ...string) *Registry { return newRegistry(false, formats) }

// NewShared is New for a replica that shares the fleet with others: each
// cluster is NotOwned until Assign says otherwise.
func NewShared(formats ...string) *Registry { return newRegistry(true, formats) }

func newRegistry(shared bool, formats []string) *Registry {
	r := &Registry{
		shared:   shared,
		formats:  slices.Clone(formats),
		clusters: map[string]*Cluster{},
		recorded: map[string]string{},
		claimed:  map[Source]string{},
		subs:     map[*Subscription]struct{}{},
		unsynced: map[string]struct{}{},
		synced:   make(chan struct{}),
	}
	for _, f := range formats {
		r.unsynced[f] = struct{}{}
	}
	if len(formats) == 0 {
		close(r.synced)
	}
	return r
}

// Get returns the current snapshot of cluster name.
func (r *Registry) Get(name string) (*Cluster, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.clusters[name]
	return c, ok
}

// List returns the current snapshot of every cluster, sorted by name.
func (r *Registry) List() []*Cluster {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Collect(maps.Values(r.clusters))
	slices.SortFunc(out, func(a, b *Cluster) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Synced is closed once every format's source has synced and passed over
// every Secret once. Nothing may act on the absence of a registration,
// such as deleting what a cluster left behind, before.
func (r *Registry) Synced() <-chan struct{} { return r.synced }

// markSynced records that format's first pass has ended.
func (r *Registry) markSynced(format string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.unsynced[format]; !ok {
		return
	}
	delete(r.unsynced, format)
	if len(r.unsynced) == 0 {
		close(r.synced)
	}
}

// claim records that src claims name, replacing what src claimed before.
// It reports whether the name is taken: a Secret of the fleet namespace
// claims it and src is from elsewhere, so the claim changes nothing.
func (r *Registry) claim(name string, c Claim) (taken bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.claimed[c.Source]; ok && old != name {
		r.lockedRemoveClaim(old, c.Source)
	}
	r.claimed[c.Source] = name
	cur := r.clusters[name]
	next := &Cluster{Name: name}
	if cur != nil {
		*next = *cur
	} else {
		next.ClusterID = r.recorded[name]
		if r.shared {
			next.Ownership = NotOwned
		}
	}
	next.taken = withoutSource(next.taken, c.Source)
	if !r.fromFleet(c.Source) && slices.ContainsFunc(next.Claims, func(x Claim) bool { return r.fromFleet(x.Source) }) {
		// Nobody is told: the cluster is as it was.
		next.taken = append(next.taken, c)
		r.clusters[name] = next
		return true
	}
	c.fingerprint = sha256.Sum256(c.kubeconfig)
	next.Claims = append(withoutSource(next.Claims, c.Source), c)
	r.lockedSet(cur, next)
	return false
}

// fromFleet reports whether src is a Secret of the fleet namespace.
func (r *Registry) fromFleet(src Source) bool {
	return r.fleetNamespace != "" && src.Format != ClusterProfileFormat && src.Namespace == r.fleetNamespace
}

// withoutSource returns a copy of claims without src's.
func withoutSource(claims []Claim, src Source) []Claim {
	return slices.DeleteFunc(slices.Clone(claims), func(x Claim) bool { return x.Source == src })
}

// withdraw forgets src's claim, if any.
func (r *Registry) withdraw(src Source) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name, ok := r.claimed[src]; ok {
		r.lockedRemoveClaim(name, src)
	}
}

func (r *Registry) lockedRemoveClaim(name string, src Source) {
	delete(r.claimed, src)
	cur := r.clusters[name]
	if cur == nil {
		return
	}
	next := *cur
	if slices.ContainsFunc(cur.taken, func(x Claim) bool { return x.Source == src }) {
		next.taken = withoutSource(cur.taken, src)
		r.clusters[name] = &next
		return
	}
	next.Claims = withoutSource(cur.Claims, src)
	r.lockedSet(cur, &next)
}

// Refuse records that the member of cluster name could not be built from
// the registration of generation (from Cluster.Registration). A refusal
// of an older registration is ignored.
func (r *Registry) Refuse(name string, generation int64, refusal *kubeconfig.RefusedError) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.clusters[name]
	if cur == nil || !cur.Accepted() || cur.generation != generation {
		return
	}
	next := *cur
	next.Refusal = refusal
	next.State, next.Probe = "", nil
	r.lockedPublish(name, &next)
	r.lockedResolve(cur.ClusterID) // a duplicate of it may take its cluster
}

// Assign records which replica owns cluster name and what this replica
// does for it. It is ignored for a name not registered, and in a registry
// that is not shared.
func (r *Registry) Assign(name, owner string, ownership Ownership) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.clusters[name]
	if cur == nil || !r.shared || (cur.Owner == owner && cur.Ownership == ownership) {
		return
	}
	next := *cur
	next.Owner, next.Ownership = owner, ownership
	switch {
	case ownership == NotOwned:
		next.State, next.Probe = "", nil // known to its owner only
	case cur.Ownership == NotOwned && next.Accepted():
		next.State = fleetv1alpha1.MemberStatePending
	}
	r.lockedPublish(name, &next)
}

// Credentials are what the manager knows of a cluster's credential, never
// the credential itself: the fact the token renewal publishes.
type Credentials struct {
	// Generation is the generation (see Cluster.Registration) of the
	// kubeconfig described.
	Generation int64
	kubeconfig.Credential
	// Renewable is true when the manager renews the token itself.
	Renewable bool
	// Expiring is true when less than a tenth of the credential's
	// lifetime is left.
	Expiring bool
	// Expired is true once the credential's expiry has passed.
	Expired bool
	// LastRenewal is when the manager last wrote a renewed token into the
	// Secret; zero before.
	LastRenewal time.Time
	// RenewalError says why the last renewal failed; empty after a
	// success.
	RenewalError string
}

// ObserveState records the state of the member of cluster name and, when
// probe is not nil, its last probe. It is ignored for a cluster that is
// not accepted, or not run here: a member reporting as it stops. A probe
// that reviewed the accepted kubeconfig's credentials makes the claim's
// Version the ProbedVersion. A probe that succeeded, after one that did,
// in the same state and ProbedVersion, changes the snapshot without an
// event: subscribers would otherwise be woken for every member every
// probe interval, for nothing but its time. Its signature suits the
// member pool's Options.Observe.
func (r *Registry) ObserveState(name string, state fleetv1alpha1.MemberState, probe *ProbeResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.clusters[name]
	if cur == nil || !cur.RunsHere() {
		return
	}
	next := *cur
	next.State = state
	if probe != nil {
		next.Probe = probe
		if probe.Kubeconfig == cur.Claims[0].fingerprint {
			next.ProbedVersion = cur.Claims[0].Version
		}
	}
	if state == cur.State && next.ProbedVersion == cur.ProbedVersion && probe != nil && probe.Err == nil && cur.Probe != nil && cur.Probe.Err == nil {
		r.clusters[name] = &next
		return
	}
	r.lockedPublish(name, &next)
}

// lockedSet derives next's labels, refusal and generation from its
// claims, then publishes it, or removes the name when no claim is left.
// The claims from elsewhere are set aside while the fleet namespace
// claims the name, and count again once it no longer does.
func (r *Registry) lockedSet(cur, next *Cluster) {
	all := slices.Concat(next.Claims, next.taken)
	next.Claims, next.taken = all, nil
	if slices.ContainsFunc(all, func(x Claim) bool { return r.fromFleet(x.Source) }) {
		next.Claims = slices.DeleteFunc(slices.Clone(all), func(x Claim) bool { return !r.fromFleet(x.Source) })
		next.taken = slices.DeleteFunc(all, func(x Claim) bool { return r.fromFleet(x.Source) })
	}
	if len(next.Claims) == 0 {
		delete(r.clusters, next.Name)
		r.lockedNotify(next.Name)
		if cur != nil {
			r.lockedResolve(cur.ClusterID) // a duplicate of it may take its cluster
		}
		return
	}
	slices.SortFunc(next.Claims, r.compareClaims)
	first := next.Claims[0]
	otherKubeconfig := cur != nil && len(cur.Claims) > 0 && !slices.Equal(cur.Claims[0].kubeconfig, first.kubeconfig)
	if otherKubeconfig {
		// It may reach another cluster: unknown until its member reports.
		next.ClusterID, next.DuplicateOf, next.reported, next.unrecorded = "", "", false, true
	}
	// One Secret read by two formats is one claim.
	objects := map[string]struct{}{}
	for _, c := range next.Claims {
		objects[c.Source.object()] = struct{}{}
	}
	next.Labels = first.Labels
	if len(objects) > 1 || first.Refusal != nil {
		next.DuplicateOf = "" // refused for what its claims say
	}
	switch {
	case len(objects) > 1:
		names := slices.Sorted(maps.Keys(objects))
		next.Refusal = &kubeconfig.RefusedError{Reason: ReasonClusterNameConflict,
			Message: "the cluster name is claimed by " + strings.Join(names, ", ") + "; none is engaged until only one claims it"}
	case first.Refusal != nil:
		next.Refusal = first.Refusal
	case next.DuplicateOf != "":
		next.Refusal = duplicateRefusal(next.DuplicateOf)
	default:
		next.Refusal = nil
	}
	wasAccepted := cur != nil && cur.Accepted()
	switch {
	case !next.Accepted():
		next.State, next.Probe = "", nil
	case !wasAccepted || otherKubeconfig:
		next.generation = r.lockedNextGeneration()
		if !wasAccepted && next.Ownership != NotOwned {
			next.State, next.Probe = fleetv1alpha1.MemberStatePending, nil
		}
	}
	r.lockedPublish(next.Name, next)
	if otherKubeconfig {
		r.lockedResolve(cur.ClusterID) // a duplicate of it may take its cluster
	}
	r.lockedResolve(next.ClusterID)
}

// lockedNextGeneration returns a generation no registration had.
func (r *Registry) lockedNextGeneration() int64 {
	r.generations++
	return r.generations
}

func (r *Registry) lockedPublish(name string, c *Cluster) {
	r.clusters[name] = c
	r.lockedNotify(name)
}

func (r *Registry) lockedNotify(name string) {
	for s := range r.subs {
		s.queue.Add(name)
	}
}

// compareClaims orders claims by format preference, then by Secret.
func (r *Registry) compareClaims(a, b Claim) int {
	return cmp.Or(
		cmp.Compare(r.formatRank(a.Source.Format), r.formatRank(b.Source.Format)),
		strings.Compare(a.Source.String(), b.Source.String()),
	)
}

func (r *Registry) formatRank(format string) int {
	if i := slices.Index(r.formats, format); i >= 0 {
		return i
	}
	return len(r.formats)
}

// Subscribe returns a subscription that receives the current state of
// every cluster now, then of each cluster that changes, until ctx ends.
func (r *Registry) Subscribe(ctx context.Context) *Subscription {
	s := newSubscription(r)
	r.mu.Lock()
	r.subs[s] = struct{}{}
	for name := range r.clusters {
		s.queue.Add(name)
	}
	r.mu.Unlock()
	context.AfterFunc(ctx, func() {
		r.mu.Lock()
		delete(r.subs, s)
		r.mu.Unlock()
		s.queue.ShutDown()
	})
	return s
}
