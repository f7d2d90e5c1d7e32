package propagation

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

func TestMemberErrorsAreToldInTheManagersWords(t *testing.T) {
	const words = "the member's words: see evil.example"
	tests := map[string]struct {
		err  error
		want string
	}{
		"invalid": {
			fmt.Errorf("patch: %w", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "web", field.ErrorList{field.Invalid(field.NewPath("data"), "x", words)})),
			"422 Invalid",
		},
		"bad request":                   {apierrors.NewBadRequest(words), "400 BadRequest"},
		"a reason that is not a word":   {&apierrors.StatusError{ErrStatus: metav1.Status{Code: 400, Reason: metav1.StatusReason(words), Message: words}}, "400"},
		"an error that is not a status": {fmt.Errorf("%s", words), "no status"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := describeStatus(tc.err); got != tc.want || strings.Contains(got, "evil") {
				t.Errorf("describeStatus = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSelectorThatDoesNotParseDeselectsNoNamedOut: with names and a
// selector that does not parse, a member the names leave out is not
// deselected either: every member is held.
func TestSelectorThatDoesNotParseDeselectsNoNamedOut(t *testing.T) {
	t.Parallel()
	p := &fleetv1alpha1.Propagation{Spec: fleetv1alpha1.PropagationSpec{Members: fleetv1alpha1.MemberSelector{
		Names:    []string{"east"},
		Selector: &fleetv1alpha1.LabelSelector{MatchLabels: map[string]fleetv1alpha1.LabelValue{"env": "has space"}},
	}}}
	for _, name := range []string{"east", "west"} {
		if selected, err := selects(p, name, map[string]string{"env": "prod"}); err == nil {
			t.Errorf("selects(%s) = %v, nil; want the selector's error, which holds the member", name, selected)
		}
	}
}
