package content

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// Cache builds each Propagation's content once per change of what it is
// built from, and shares it with every caller: the member runs, status
// and revisions of that Propagation.
//
// A content is built again when the Propagation's UID or generation
// changes, or what its entries select on the hub: another set of objects,
// another resourceVersion of one, or another problem listing them. The
// fleet namespace and the refusal rules are the Builder's and the code's,
// fixed for a Cache. The scope the hub gives each Envelope manifest's kind
// is part of what content is built from; a content that read a manifest
// of a kind the hub did not know is not kept: the hub may learn its scope.
//
// The Cache holds one entry per Propagation it was asked of; Forget drops
// the entry of one that is gone.
//
// What Get returns is shared: it must not be changed. A caller that needs
// an object of it to change (a member's copy) copies it first.
type Cache struct {
	// Builder builds; its Build builds afresh, uncached.
	*Builder
	// Built, if set before the first Get, is told of each build.
	Built func()

	// mu guards entries; an entry's own lock is taken after it is
	// released, never with it.
	mu      sync.Mutex
	entries map[types.NamespacedName]*entry
	builds  atomic.Int64
}

// entry is the content of one Propagation, and what it was built from.
// mu serializes the builds of the Propagation: runs that ask at once
// wait for one build instead of making their own.
type entry struct {
	mu         sync.Mutex
	uid        types.UID
	generation int64
	// inputs is what the entries selected: each object's UID and
	// resourceVersion, or the problem met listing them.
	inputs  []byte
	content *Content
	hash    string
}

// NewCache returns an empty Cache of the contents b builds.
func NewCache(b *Builder) *Cache {
	return &Cache{Builder: b, entries: map[types.NamespacedName]*entry{}}
}

// Get returns p's content and the hash that names it, built again only
// when what it is built from changed. The content is shared: it must not
// be changed.
func (c *Cache) Get(ctx context.Context, p *fleetv1alpha1.Propagation) (*Content, string, error) {
	read, err := c.read(ctx, p)
	if err != nil {
		return nil, "", err
	}
	inputs := append(inputsOf(read), c.manifestScopes(read)...)
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	c.mu.Lock()
	e, ok := c.entries[key]
	if !ok {
		e = &entry{}
		c.entries[key] = e
	}
	c.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.content != nil && e.uid == p.UID && e.generation == p.Generation && string(e.inputs) == string(inputs) {
		return e.content, e.hash, nil
	}
	built, settled := c.assemble(p, read)
	c.builds.Add(1)
	if c.Built != nil {
		c.Built()
	}
	_, hash, err := built.Encode()
	if err != nil {
		return nil, "", err
	}
	if settled {
		e.uid, e.generation, e.inputs, e.content, e.hash = p.UID, p.Generation, inputs, built, hash
	} else {
		e.content = nil
	}
	return built, hash, nil
}

// manifestScopes encodes the scope the hub's mapping gives the kind of
// each manifest of the Envelopes read: a CRD deleted and made again of the
// other scope changes what the content holds, though no object changed.
func (c *Cache) manifestScopes(read []selection) []byte {
	var b []byte
	for _, s := range read {
		for i := range s.objs {
			if !IsEnvelope(s.objs[i].GroupVersionKind()) {
				continue
			}
			manifests, _ := s.objs[i].Object["manifests"].([]any)
			for _, m := range manifests {
				fields, _ := m.(map[string]any)
				apiVersion, _ := fields["apiVersion"].(string)
				kind, _ := fields["kind"].(string)
				b = append(b, apiVersion...)
				b = append(b, '/')
				b = append(b, kind...)
				b = append(b, '=')
				gv, err := schema.ParseGroupVersion(apiVersion)
				if err != nil {
					b = append(b, "?;"...)
					continue
				}
				mapping, err := c.Mapper.RESTMapping(gv.WithKind(kind).GroupKind(), gv.Version)
				if err != nil {
					b = append(b, "?;"...)
					continue
				}
				b = append(b, mapping.Scope.Name()...)
				b = append(b, ';')
			}
		}
	}
	return b
}

// Forget drops the content of the Propagation key names, which is gone.
func (c *Cache) Forget(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, key)
}

// Builds is how many contents c built.
func (c *Cache) Builds() int64 { return c.builds.Load() }

// inputsOf encodes what each entry of a Propagation's resources selected,
// read: the UID and resourceVersion of each object, in order, or the
// problem met listing them.
func inputsOf(read []selection) []byte {
	var b []byte
	for _, s := range read {
		if s.problem != nil {
			b = append(b, '!')
			b = append(b, s.problem.Reason...)
			b = append(b, 0)
			b = append(b, s.problem.Message...)
		}
		for i := range s.objs {
			b = append(b, s.objs[i].GetUID()...)
			b = append(b, '/')
			b = append(b, s.objs[i].GetResourceVersion()...)
			b = append(b, ';')
		}
		b = append(b, '\n')
	}
	return b
}
