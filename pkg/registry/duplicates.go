package registry

import (
	"cmp"
	"crypto/sha256"
	"strings"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// ReasonDuplicateCluster refuses a name whose member is a cluster that an
// older registration, under another name, already registers.
const ReasonDuplicateCluster = "DuplicateCluster"

// Identify records id, the identity of the cluster that the member of
// name reaches with the kubeconfig whose SHA-256 is fingerprint (its
// kube-system Namespace UID, or a hash of its server and CA), and returns
// the name that keeps that cluster: of the names registering it, the one
// whose registration was created first, the name breaking ties. Every
// other name of the cluster is refused as ReasonDuplicateCluster, naming
// the keeper, and engages nothing until the keeper goes or points
// elsewhere.
//
// It returns name for a name the registry does not hold (a member set
// directly, not from the registry), and "" for a fingerprint that is not
// the accepted kubeconfig's: a member that is being replaced.
func (r *Registry) Identify(name string, fingerprint [sha256.Size]byte, id string) (keeper string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.clusters[name]
	if cur == nil {
		return name
	}
	if len(cur.Claims) == 0 || sha256.Sum256(cur.Claims[0].kubeconfig) != fingerprint {
		return ""
	}
	if cur.ClusterID != id || !cur.reported {
		next := *cur
		next.ClusterID, next.reported = id, true
		r.lockedPublish(name, &next)
		r.lockedResolve(cur.ClusterID)
		r.lockedResolve(id)
	}
	if c := r.clusters[name]; c.DuplicateOf != "" {
		return c.DuplicateOf
	}
	return name
}

// Record takes the identity that the hub's MemberCluster of name records
// (status.clusterID), written by whichever replica ran its member. Until
// this replica's member of name reports one, it stands for the name's
// cluster, so that a name whose member runs on another replica, or has
// not connected since a restart, still keeps its cluster. It no longer
// applies once the name's kubeconfig changed in this process. An empty
// id forgets it.
func (r *Registry) Record(name, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recorded[name] == id {
		return
	}
	if id == "" {
		delete(r.recorded, name)
	} else {
		r.recorded[name] = id
	}
	cur := r.clusters[name]
	if cur == nil || cur.reported || cur.unrecorded || cur.ClusterID == id {
		return
	}
	next := *cur
	next.ClusterID = id
	r.lockedPublish(name, &next)
	r.lockedResolve(cur.ClusterID)
	r.lockedResolve(id)
}

// candidate reports whether c competes for its cluster: registered, and
// refused for nothing but being a duplicate.
func candidate(c *Cluster) bool {
	return len(c.Claims) > 0 && (c.Refusal == nil || c.DuplicateOf != "")
}

// lockedResolve decides which name keeps the cluster of identity id and
// refuses the others, or accepts them again: the keeper is the candidate
// whose accepted registration was created first, then the first name. A
// registry that allows duplicates refuses none.
func (r *Registry) lockedResolve(id string) {
	if id == "" || r.allowDuplicates {
		return
	}
	var group []*Cluster
	for _, c := range r.clusters {
		if candidate(c) && c.ClusterID == id {
			group = append(group, c)
		}
	}
	if len(group) == 0 {
		return
	}
	keeper := group[0]
	for _, c := range group[1:] {
		if cmp.Or(c.Claims[0].Created.Compare(keeper.Claims[0].Created), strings.Compare(c.Name, keeper.Name)) < 0 {
			keeper = c
		}
	}
	for _, c := range group {
		if c == keeper {
			r.lockedSetDuplicate(c, "")
		} else {
			r.lockedSetDuplicate(c, keeper.Name)
		}
	}
}

// lockedSetDuplicate refuses c as a duplicate of keeper, or accepts it
// again when keeper is "", and publishes the change, if any.
func (r *Registry) lockedSetDuplicate(c *Cluster, keeper string) {
	if c.DuplicateOf == keeper {
		return
	}
	next := *c
	next.DuplicateOf = keeper
	if keeper == "" {
		// Accepted again: the member pool builds its member anew.
		next.Refusal = nil
		next.generation = r.lockedNextGeneration()
		if next.Ownership != NotOwned {
			next.State, next.Probe = fleetv1alpha1.MemberStatePending, nil
		}
	} else {
		next.Refusal = duplicateRefusal(keeper)
		next.State, next.Probe = "", nil
	}
	r.lockedPublish(c.Name, &next)
}

func duplicateRefusal(keeper string) *kubeconfig.RefusedError {
	return &kubeconfig.RefusedError{Reason: ReasonDuplicateCluster,
		Message: "the cluster is already registered as " + keeper + ", which was registered first; this name engages nothing until that registration is removed or points elsewhere"}
}
