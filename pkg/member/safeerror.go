package member

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
)

// SafeError describes err without quoting anything a member sent: a
// hostile API server chooses its response bodies, so an API error is
// described by its code and reason only. Errors that never carry a body,
// such as transport errors and missing kinds, keep their text.
func SafeError(err error) string {
	if err == nil {
		return ""
	}
	if meta.IsNoMatchError(err) {
		return err.Error()
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		return fmt.Sprintf("the API server answered %d %s", s.Code, s.Reason)
	}
	return err.Error()
}
