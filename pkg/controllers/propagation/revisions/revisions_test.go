package revisions

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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
