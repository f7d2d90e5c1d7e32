package tenancy

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// Namespace is a hub namespace as a policy selects it.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Member is a member as a policy selects it: its name, its MemberCluster's
// labels, and its source (SourceOf its registration).
type Member struct {
	Name   string
	Labels map[string]string
	Source string
}

// MemberOf is the member a MemberCluster describes.
func MemberOf(mc *fleetv1alpha1.MemberCluster) Member {
	return Member{Name: mc.Name, Labels: mc.Labels, Source: SourceOf(mc.Spec.SecretRef)}
}

// ClusterProfileSource prefixes the source of a member a ClusterProfile
// registers.
const ClusterProfileSource = "clusterprofile/"

// SourceOf is what a policy's sources match for the member the
// registration ref names: the namespace of its registration Secret,
// whatever the Secret's format (native, multicluster-runtime, Cluster
// API, Argo CD); for a ClusterProfile, "clusterprofile/" and its
// namespace, so that a ClusterProfile written in the fleet namespace, by
// whoever may write ClusterProfiles there, never passes for a Secret of
// the fleet's.
func SourceOf(ref fleetv1alpha1.SecretReference) string {
	if ref.Format == fleetv1alpha1.FormatClusterProfile {
		return ClusterProfileSource + ref.Namespace
	}
	return ref.Namespace
}

// Reach is what a set of policies lets each namespace reach. The zero
// Reach is not usable: build one with New, Everything or Unknown.
type Reach struct {
	everything bool
	unknown    error
	policies   []policy
}

// policy is one TenancyPolicy, parsed.
type policy struct {
	name       string
	namespaces []string
	nsSelector labels.Selector // nil: none
	nsErr      error
	members    []string
	selector   labels.Selector // nil: none
	membersErr error
	sources    []string
	kinds      fleetv1alpha1.KindRules
}

// Everything is the Reach of a fleet that does not enforce tenancy: every
// namespace reaches every member with every kind.
func Everything() *Reach { return &Reach{everything: true} }

// Unknown is the Reach when the policies cannot be read: every namespace is
// in doubt, for the reason err gives.
func Unknown(err error) *Reach { return &Reach{unknown: err} }

// New parses policies. A policy whose selectors do not parse is kept, as a
// doubt for the namespaces it may speak for.
func New(policies []fleetv1alpha1.TenancyPolicy) *Reach {
	r := &Reach{}
	for i := range policies {
		p := &policies[i]
		parsed := policy{
			name:       p.Name,
			namespaces: p.Spec.Namespaces.Names,
			members:    p.Spec.Members.Names,
			sources:    p.Spec.Members.Sources,
			kinds:      p.Spec.Kinds,
		}
		if p.Spec.Namespaces.Selector != nil {
			parsed.nsSelector, parsed.nsErr = p.Spec.Namespaces.Selector.AsSelector()
		}
		if p.Spec.Members.Selector != nil {
			parsed.selector, parsed.membersErr = p.Spec.Members.Selector.AsSelector()
		}
		r.policies = append(r.policies, parsed)
	}
	sort.Slice(r.policies, func(i, j int) bool { return r.policies[i].name < r.policies[j].name })
	return r
}

// NamespaceReach is what one namespace may reach.
type NamespaceReach struct {
	namespace  string
	everything bool
	doubt      error
	policies   []*policy
}

// For is ns's reach.
func (r *Reach) For(ns Namespace) NamespaceReach {
	n := NamespaceReach{namespace: ns.Name, everything: r.everything, doubt: r.unknown}
	if r.everything || r.unknown != nil {
		return n
	}
	var doubts []string
	for i := range r.policies {
		p := &r.policies[i]
		if p.nsErr != nil {
			doubts = append(doubts, fmt.Sprintf("TenancyPolicy %s: its namespaces selector: %v", p.name, p.nsErr))
			continue
		}
		if !slices.Contains(p.namespaces, ns.Name) && (p.nsSelector == nil || !p.nsSelector.Matches(labels.Set(ns.Labels))) {
			continue
		}
		if p.membersErr != nil {
			doubts = append(doubts, fmt.Sprintf("TenancyPolicy %s: its members selector: %v", p.name, p.membersErr))
			continue
		}
		n.policies = append(n.policies, p)
	}
	if len(doubts) > 0 {
		n.doubt = fmt.Errorf("%s", strings.Join(doubts, "; "))
	}
	return n
}

// Doubt is why the namespace's reach is not known (a policy that may be
// for it does not parse, or the policies cannot be read), nil when it is.
// In doubt, hold: add nothing and remove nothing.
func (n NamespaceReach) Doubt() error { return n.doubt }

// Policies names the policies for the namespace.
func (n NamespaceReach) Policies() []string {
	names := make([]string, 0, len(n.policies))
	for _, p := range n.policies {
		names = append(names, p.name)
	}
	return names
}

// Reaches reports whether the namespace may reach m, and when not, why. In
// doubt it reports false: ask Doubt first.
func (n NamespaceReach) Reaches(m Member) (bool, string) {
	if n.everything {
		return true, ""
	}
	if n.doubt != nil {
		return false, n.doubt.Error()
	}
	if len(n.policies) == 0 {
		return false, fmt.Sprintf("no TenancyPolicy is for namespace %s", n.namespace)
	}
	for _, p := range n.policies {
		if p.reaches(m) {
			return true, ""
		}
	}
	return false, fmt.Sprintf("no TenancyPolicy for namespace %s lets it reach member %s (policies for it: %s)", n.namespace, m.Name, strings.Join(n.Policies(), ", "))
}

// Allows reports whether the namespace may carry the kind gk to m, and when
// not, why.
func (n NamespaceReach) Allows(m Member, gk schema.GroupKind) (bool, string) {
	if n.everything {
		return true, ""
	}
	if ok, why := n.Reaches(m); !ok {
		return false, why
	}
	var reaching []string
	for _, p := range n.policies {
		if !p.reaches(m) {
			continue
		}
		if p.kinds.Allows(gk.Group, gk.Kind) {
			return true, ""
		}
		reaching = append(reaching, p.name)
	}
	return false, fmt.Sprintf("kind %s is not allowed to namespace %s in member %s by TenancyPolicy %s", kindName(gk), n.namespace, m.Name, strings.Join(reaching, ", "))
}

// reaches reports whether p names m.
func (p *policy) reaches(m Member) bool {
	if len(p.sources) > 0 && !slices.Contains(p.sources, m.Source) {
		return false
	}
	return slices.Contains(p.members, m.Name) || (p.selector != nil && p.selector.Matches(labels.Set(m.Labels)))
}

// kindName is gk as kubectl names it: Kind, or Kind.group.
func kindName(gk schema.GroupKind) string {
	if gk.Group == "" {
		return gk.Kind
	}
	return gk.Kind + "." + gk.Group
}
