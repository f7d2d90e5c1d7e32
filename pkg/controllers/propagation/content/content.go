package content

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// Builder builds the content of Propagations from the hub.
type Builder struct {
	// Fleet is the fleet namespace: nothing of it is copied (see Refusal).
	Fleet string
	// Mapper tells the scope of the kinds of an Envelope's manifests.
	Mapper meta.RESTMapper
	// List lists the hub objects of namespace that sel selects. A
	// ReasonedError fails that entry only (it is a Problem of the
	// content); any other error fails the build. The objects it
	// returns may be a cache's own: the Builder never changes them.
	List func(ctx context.Context, namespace string, sel fleetv1alpha1.ResourceSelector) ([]unstructured.Unstructured, error)
}

// ReasonedError is an error of one resource entry, with the reason a
// member's result or the Propagation's conditions give for it.
type ReasonedError interface {
	error
	ErrorReason() string
}

// Error is an error of the content stage, with its reason: an entry
// that does not parse or selects nothing, a revision that does not
// verify.
type Error struct {
	Reason, Message string
}

func (e *Error) Error() string { return e.Message }

// ErrorReason makes e a ReasonedError.
func (e *Error) ErrorReason() string { return e.Reason }

// Content is what a Propagation applies, before it is fitted to a member
// (selection and overrides' variables): its resources, its overrides,
// the hub objects they select, Envelopes unpacked, and the problems met
// reading them. A revision holds one; its hash names it.
type Content struct {
	Resources []fleetv1alpha1.ResourceSelector `json:"resources"`
	Overrides []fleetv1alpha1.Override         `json:"overrides,omitempty"`
	Objects   []Object                         `json:"objects,omitempty"`
	Problems  []Problem                        `json:"problems,omitempty"`
	// Selected is what the resources select now, read from the hub; it
	// is no part of a revision.
	Selected Selected `json:"-"`
}

// Selected is what a Propagation's resources select on the hub: how
// many objects, the first MaxListedResources of them, and the first
// entry that selects none.
type Selected struct {
	Count  int32
	Listed []fleetv1alpha1.ResourceIdentifier
	// Empty says which entry selects no hub object (ResourceNotFound or
	// NothingSelected), nil when every one selects some; unread entries
	// (a kind the hub does not serve, say) are judged by their problem.
	Empty *Error
	// EmptyEntries counts the entries that select none.
	EmptyEntries int
}

// add counts obj, selected, a manifest of the Envelope envelope if set.
func (s *Selected) add(obj *unstructured.Unstructured, envelope string) {
	s.Count++
	if len(s.Listed) < fleetv1alpha1.MaxListedResources {
		s.Listed = append(s.Listed, fleetv1alpha1.ResourceIdentifier{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Name: obj.GetName(), Envelope: envelope})
	}
}

// nothingFor records that entry i, sel, selects no hub object.
func (s *Selected) nothingFor(i int, sel fleetv1alpha1.ResourceSelector) {
	s.EmptyEntries++
	if s.Empty != nil {
		return
	}
	if sel.Name != "" {
		s.Empty = &Error{Reason: fleetv1alpha1.ReasonResourceNotFound, Message: fmt.Sprintf("resources[%d]: %s %s %s is not on the hub", i, sel.APIVersion, sel.Kind, sel.Name)}
		return
	}
	selector := "<invalid>"
	if ls, err := sel.Selector.AsSelector(); err == nil {
		selector = ls.String()
	}
	s.Empty = &Error{Reason: fleetv1alpha1.ReasonNothingSelected, Message: fmt.Sprintf("resources[%d]: the selector %q matches no %s %s on the hub", i, selector, sel.APIVersion, sel.Kind)}
}

// Object is a selected hub object, as its author wrote it (no
// status, no server-set metadata), and the index of the resource that
// selects it.
type Object struct {
	Resource int            `json:"resource"`
	Object   map[string]any `json:"object"`
}

// Problem is a problem met reading the hub objects, which fails
// every member given the content. Kind, when set, is a kind whose hub
// objects could not be read: none of its copies can be proven unwanted.
type Problem struct {
	Reason  string                       `json:"reason"`
	Message string                       `json:"message"`
	Kind    *fleetv1alpha1.KindReference `json:"kind,omitempty"`
}

// Build reads what p applies now from the hub.
func (b *Builder) Build(ctx context.Context, p *fleetv1alpha1.Propagation) (*Content, error) {
	read, err := b.read(ctx, p)
	if err != nil {
		return nil, err
	}
	c, _ := b.assemble(p, read)
	return c, nil
}

// selection is what one entry of a Propagation's resources selects on
// the hub: its objects, sorted, or the problem met listing them.
type selection struct {
	objs    []unstructured.Unstructured
	problem *Problem
}

// read lists what each entry of p's resources selects.
func (b *Builder) read(ctx context.Context, p *fleetv1alpha1.Propagation) ([]selection, error) {
	read := make([]selection, len(p.Spec.Resources))
	for i, sel := range p.Spec.Resources {
		objs, err := b.List(ctx, p.Namespace, sel)
		if rerr, ok := errors.AsType[ReasonedError](err); ok {
			problem := Problem{Reason: rerr.ErrorReason(), Message: rerr.Error()}
			if gvk, err := ResourceKind(sel); err == nil && rerr.ErrorReason() != fleetv1alpha1.ReasonRefused {
				problem.Kind = &fleetv1alpha1.KindReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind}
			}
			read[i].problem = &problem
			continue
		}
		if err != nil {
			return nil, err
		}
		// The hub cache lists in no set order: the same objects must make
		// the same content, and so the same hash.
		slices.SortFunc(objs, func(a, b unstructured.Unstructured) int {
			return cmp.Or(strings.Compare(a.GetNamespace(), b.GetNamespace()), strings.Compare(a.GetName(), b.GetName()))
		})
		read[i].objs = objs
	}
	return read, nil
}

// assemble makes p's content of what its entries selected, read. It
// reports whether the content follows from p's spec and read alone: not
// when the hub did not know the kind of an Envelope's manifest, whose
// scope it may learn later.
func (b *Builder) assemble(p *fleetv1alpha1.Propagation, read []selection) (*Content, bool) {
	spec := p.Spec.DeepCopy()
	c := &Content{Resources: spec.Resources, Overrides: spec.Overrides}
	settled := true
	for i, sel := range p.Spec.Resources {
		if read[i].problem != nil {
			c.Problems = append(c.Problems, *read[i].problem)
			continue
		}
		objs := read[i].objs
		if len(objs) == 0 {
			c.Selected.nothingFor(i, sel)
			continue
		}
		for j := range objs {
			o := &objs[j]
			if rule, refused := Refusal(o, b.Fleet); refused {
				c.Problems = append(c.Problems, Problem{Reason: fleetv1alpha1.ReasonRefused, Message: fmt.Sprintf("%s %s is refused: %s", o.GetKind(), o.GetName(), rule)})
				continue
			}
			if !IsEnvelope(o.GroupVersionKind()) {
				c.Objects = append(c.Objects, Object{Resource: i, Object: Authored(o)})
				c.Selected.add(o, "")
				continue
			}
			manifests, problems, mapped := b.unpack(o)
			settled = settled && mapped
			c.Problems = append(c.Problems, problems...)
			for _, m := range manifests {
				c.Objects = append(c.Objects, Object{Resource: i, Object: Authored(m)})
				c.Selected.add(m, o.GetName())
			}
		}
	}
	return c, settled
}

// Authored returns obj as its author wrote it: what a copy is made from,
// without status or the metadata the hub's API server keeps.
func Authored(obj *unstructured.Unstructured) map[string]any {
	out := map[string]any{}
	for k, v := range obj.Object {
		switch k {
		case "metadata", "status":
		default:
			out[k] = runtime.DeepCopyJSONValue(v)
		}
	}
	meta := map[string]any{"name": obj.GetName()}
	if ns := obj.GetNamespace(); ns != "" {
		meta["namespace"] = ns
	}
	if uid := obj.GetUID(); uid != "" {
		meta["uid"] = string(uid)
	}
	if l := obj.GetLabels(); len(l) > 0 {
		meta["labels"] = stringMap(l)
	}
	if a := obj.GetAnnotations(); len(a) > 0 {
		meta["annotations"] = stringMap(a)
	}
	out["metadata"] = meta
	return out
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Encode returns c as JSON and its hash.
func (c *Content) Encode() ([]byte, string, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw)
	return raw, hex.EncodeToString(sum[:8]), nil
}

// FirstProblem returns c's first problem, nil if it has none.
func (c *Content) FirstProblem() *Error {
	if len(c.Problems) == 0 {
		return nil
	}
	return &Error{Reason: c.Problems[0].Reason, Message: c.Problems[0].Message}
}

// KindProblems returns the kinds whose hub objects c could not read.
func (c *Content) KindProblems() []schema.GroupVersionKind {
	var kinds []schema.GroupVersionKind
	for _, p := range c.Problems {
		if p.Kind != nil {
			kinds = append(kinds, schema.FromAPIVersionAndKind(p.Kind.APIVersion, p.Kind.Kind))
		}
	}
	return kinds
}
