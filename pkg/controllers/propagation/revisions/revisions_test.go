package revisions

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/content"
)

// TestRevisionIsVerifiedOncePerResourceVersion: a revision is decoded
// and checked once per UID and resourceVersion, and every member run
// shares the result; a change of the revision is checked again, and
// refused when it no longer matches its hash.
func TestRevisionIsVerifiedOncePerResourceVersion(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fleetv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	p := &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", UID: "p-uid"}}
	c := &content.Content{
		Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap"}},
		Objects:   []content.Object{{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": "team", "name": "a"}}}},
	}
	_, hash, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	hub := fake.NewClientBuilder().WithScheme(scheme).Build()
	s := &Store{Hub: hub, Live: hub, Fleet: "fleet-system"}
	revs, err := s.Ensure(t.Context(), p, c, hash)
	if err != nil || len(revs) != 1 {
		t.Fatalf("revisions %v, %v; want one made", revs, err)
	}

	first, gotHash, err := s.Load(t.Context(), p, 1)
	if err != nil || gotHash != hash {
		t.Fatalf("Load: %s, %v; want hash %s", gotHash, err, hash)
	}
	again, _, err := s.Load(t.Context(), p, 1)
	if err != nil || again != first {
		t.Errorf("a second Load of the same resourceVersion decoded the revision again (%v)", err)
	}

	// A hand edit changes the content, not the hash label: refused.
	rev := &revs[0]
	if err := hub.Get(t.Context(), objectKey(rev), rev); err != nil {
		t.Fatal(err)
	}
	rev.Content.Raw = []byte(`{"resources":[],"objects":[]}`)
	if err := hub.Update(t.Context(), rev); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Load(t.Context(), p, 1); err == nil {
		t.Fatal("a revision changed after it was made was loaded")
	} else if cerr, ok := err.(*content.Error); !ok || cerr.Reason != fleetv1alpha1.ReasonRevisionInvalid {
		t.Errorf("error %v, want RevisionInvalid", err)
	}

	// Forgotten with its Propagation.
	s.Forget(p.UID)
	if n := len(s.verified.revs); n != 0 {
		t.Errorf("%d Propagations' revisions remembered after Forget, want 0", n)
	}
}

func objectKey(rev *fleetv1alpha1.PropagationRevision) types.NamespacedName {
	return types.NamespacedName{Namespace: rev.Namespace, Name: rev.Name}
}

// TestRunsThatSeeAChangeAtOnceMakeOneRevision: member runs that ask at
// once for the number of the revision of a content none holds make one
// revision, and all take its number, though the cache does not show it
// yet; a later content, once the cache shows the first, gets the next
// number.
func TestRunsThatSeeAChangeAtOnceMakeOneRevision(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fleetv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	p := &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", UID: "p-uid"}}
	contentOf := func(v string) (*content.Content, string) {
		c := &content.Content{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap"}},
			Objects:   []content.Object{{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": "team", "name": "a"}, "data": map[string]any{"v": v}}}},
		}
		_, hash, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return c, hash
	}
	hub := fake.NewClientBuilder().WithScheme(scheme).Build()
	var creates atomic.Int32
	var shown atomic.Bool
	lagging := interceptor.NewClient(hub, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			creates.Add(1)
			return cl.Create(ctx, obj, opts...)
		},
		// A cache that shows no revision until shown.
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if !shown.Load() {
				return nil
			}
			return cl.List(ctx, list, opts...)
		},
	})
	s := &Store{Hub: lagging, Live: hub, Fleet: "fleet-system"}
	c, hash := contentOf("1")
	numbers := make([]int64, 8)
	errs := make([]error, len(numbers))
	var wg sync.WaitGroup
	for i := range numbers {
		wg.Go(func() { numbers[i], errs[i] = s.EnsureNumber(t.Context(), p, c, hash, 0) })
	}
	wg.Wait()
	for i := range numbers {
		if numbers[i] != 1 || errs[i] != nil {
			t.Errorf("run %d: number %d, %v; want 1", i, numbers[i], errs[i])
		}
	}
	if n := creates.Load(); n != 1 {
		t.Errorf("%d revisions made, want 1", n)
	}
	shown.Store(true)
	c2, hash2 := contentOf("2")
	if n, err := s.EnsureNumber(t.Context(), p, c2, hash2, 0); n != 2 || err != nil {
		t.Errorf("the next content: number %d, %v; want 2", n, err)
	}
}

// TestRunsMakeAtMostOneRevisionPerPace: a burst of changes seen by member
// runs makes one revision per pace; the others are left to the paced
// sums, and the runs apply them without a number.
func TestRunsMakeAtMostOneRevisionPerPace(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fleetv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	p := &fleetv1alpha1.Propagation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", UID: "p-uid"}}
	hub := fake.NewClientBuilder().WithScheme(scheme).Build()
	var creates atomic.Int32
	counted := interceptor.NewClient(hub, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			creates.Add(1)
			return cl.Create(ctx, obj, opts...)
		},
	})
	s := &Store{Hub: counted, Live: hub, Fleet: "fleet-system"}
	for i := range 5 {
		c := &content.Content{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap"}},
			Objects:   []content.Object{{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"namespace": "team", "name": "a"}, "data": map[string]any{"v": strconv.Itoa(i)}}}},
		}
		_, hash, err := c.Encode()
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.EnsureNumber(t.Context(), p, c, hash, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(0) // none within the pace
		if i == 0 {
			want = 1
		}
		if n != want {
			t.Errorf("change %d: number %d, want %d", i, n, want)
		}
	}
	if n := creates.Load(); n != 1 {
		t.Errorf("%d revisions made in a burst within one pace, want 1", n)
	}
}
