package tenancy

import (
	"cmp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// Grant is one policy that lets a namespace reach a member, and the kinds
// it allows there.
type Grant struct {
	Policy string
	Kinds  fleetv1alpha1.KindRules
}

// Grants lists the policies that let the namespace reach m, by name; none
// when it does not, or is in doubt, or reaches everything (tenancy Off).
func (n NamespaceReach) Grants(m Member) []Grant {
	if n.everything || n.doubt != nil {
		return nil
	}
	var grants []Grant
	for _, p := range n.policies {
		if p.reaches(m) {
			grants = append(grants, Grant{Policy: p.name, Kinds: p.kinds})
		}
	}
	return grants
}

// DescribeKinds says which kinds k allows, as kubectl names kinds: "every
// kind", "ConfigMap, Deployment.apps", "every kind but *.rbac.authorization.k8s.io".
func DescribeKinds(k fleetv1alpha1.KindRules) string {
	allowed := "every kind"
	if len(k.Allow) > 0 {
		allowed = describeRules(k.Allow)
	}
	if len(k.Deny) == 0 {
		return allowed
	}
	return allowed + " but " + describeRules(k.Deny)
}

// describeRules names rules, "*" standing for any kind or group.
func describeRules(rules []fleetv1alpha1.KindRule) string {
	names := make([]string, len(rules))
	for i, r := range rules {
		kind := r.Kind
		if kind == "" {
			kind = "*"
		}
		names[i] = kindName(schema.GroupKind{Group: r.Group, Kind: kind})
	}
	return strings.Join(names, ", ")
}

// Propagation is what the dry run needs of a namespaced Propagation.
type Propagation struct {
	Namespace, Name string
	// Members is its spec.members.
	Members fleetv1alpha1.MemberSelector
	// Listed are the members its status lists: they hold, or are being
	// given, its copies.
	Listed []string
	// Kinds are the kinds it copies: those of spec.resources and those
	// status.kinds records (an Envelope's manifests' among them).
	Kinds []schema.GroupKind
}

// PropagationOf is what the dry run needs of p.
func PropagationOf(p *fleetv1alpha1.Propagation) Propagation {
	out := Propagation{Namespace: p.Namespace, Name: p.Name, Members: p.Spec.Members}
	for _, m := range p.Status.Members {
		out.Listed = append(out.Listed, m.Name)
	}
	add := func(apiVersion, kind string) {
		gk := schema.FromAPIVersionAndKind(apiVersion, kind).GroupKind()
		// An Envelope is not copied: its manifests are, under their kinds.
		if gk.Group == fleetv1alpha1.GroupVersion.Group && gk.Kind == "Envelope" {
			return
		}
		if !slices.Contains(out.Kinds, gk) {
			out.Kinds = append(out.Kinds, gk)
		}
	}
	for _, r := range p.Spec.Resources {
		add(r.APIVersion, r.Kind)
	}
	for _, k := range p.Status.Kinds {
		add(k.APIVersion, k.Kind)
	}
	return out
}

// Loss is what enforcing tenancy would take from one Propagation.
type Loss struct {
	Namespace, Name string
	// Doubt is why what it would lose is not known: its namespace's
	// policies do not parse, or its spec.members does not. Enforcing
	// would hold it (add nothing, remove nothing) until they do.
	Doubt string
	// Selected are the members it selects now, by name.
	Selected []string
	// Excluded are the members of Selected it could no longer reach.
	Excluded []Exclusion
	// Refused are the kinds it copies that a member it still reaches
	// would refuse.
	Refused []Refusal
}

// Exclusion is a member a Propagation would lose, and why.
type Exclusion struct {
	Member, Reason string
}

// Refusal is a kind some members would refuse, and why the first of them
// does.
type Refusal struct {
	Kind    schema.GroupKind
	Members []string
	Reason  string
}

// Loses reports whether enforcing would take anything from the
// Propagation, or leave it in doubt.
func (l Loss) Loses() bool { return l.Doubt != "" || len(l.Excluded) > 0 || len(l.Refused) > 0 }

// DryRun says, for each of props, what enforcing r would take from it:
// the members (of members) it selects now that its namespace could no
// longer reach, and the kinds those it still reaches would refuse. A
// member its status lists counts as selected: it holds, or is being
// given, copies.
// namespaces are the hub's Namespaces by name; one missing is taken with
// no labels. The losses are in the order of props.
func DryRun(r *Reach, namespaces map[string]Namespace, props []Propagation, members []Member) []Loss {
	losses := make([]Loss, 0, len(props))
	for _, p := range props {
		ns, ok := namespaces[p.Namespace]
		if !ok {
			ns = Namespace{Name: p.Namespace}
		}
		losses = append(losses, dryRun(r.For(ns), p, members))
	}
	return losses
}

// dryRun is DryRun for one Propagation p of the namespace whose reach is n.
func dryRun(n NamespaceReach, p Propagation, members []Member) Loss {
	loss := Loss{Namespace: p.Namespace, Name: p.Name}
	var selected []Member
	for _, m := range members {
		ok, err := p.Members.Selects(m.Name, m.Labels)
		if err != nil {
			loss.Doubt = "its spec.members does not parse: " + err.Error()
			return loss
		}
		if ok || slices.Contains(p.Listed, m.Name) {
			selected = append(selected, m)
		}
	}
	slices.SortFunc(selected, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	for _, m := range selected {
		loss.Selected = append(loss.Selected, m.Name)
	}
	if err := n.Doubt(); err != nil {
		loss.Doubt = err.Error()
		return loss
	}
	refused := map[schema.GroupKind]*Refusal{}
	for _, m := range selected {
		if ok, why := n.Reaches(m); !ok {
			loss.Excluded = append(loss.Excluded, Exclusion{Member: m.Name, Reason: why})
			continue
		}
		for _, gk := range p.Kinds {
			ok, why := n.Allows(m, gk)
			if ok {
				continue
			}
			if refused[gk] == nil {
				refused[gk] = &Refusal{Kind: gk, Reason: why}
			}
			refused[gk].Members = append(refused[gk].Members, m.Name)
		}
	}
	for _, gk := range p.Kinds {
		if r := refused[gk]; r != nil {
			loss.Refused = append(loss.Refused, *r)
		}
	}
	return loss
}
