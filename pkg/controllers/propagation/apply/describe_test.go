package apply

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
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
			if got := DescribeStatus(tc.err); got != tc.want || strings.Contains(got, "evil") {
				t.Errorf("DescribeStatus = %q, want %q", got, tc.want)
			}
		})
	}
}
