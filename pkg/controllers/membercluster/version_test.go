package membercluster

import (
	"io"
	"strings"
	"testing"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// endless is a /version answer that never ends.
type endless struct{ read int }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	e.read += len(p)
	return len(p), nil
}

func TestReadGitVersion(t *testing.T) {
	long := strings.Repeat("v", 1000)
	for name, tc := range map[string]struct {
		body io.Reader
		want string
	}{
		"a version":        {body: strings.NewReader(`{"gitVersion":"v1.37.1","major":"1"}`), want: "v1.37.1"},
		"a long version":   {body: strings.NewReader(`{"gitVersion":"` + long + `"}`), want: long[:fleetv1alpha1.MaxServerVersionLength]},
		"not JSON":         {body: strings.NewReader(`<html>`), want: ""},
		"an endless body":  {body: &endless{}, want: ""},
		"a version at end": {body: io.MultiReader(strings.NewReader(`{"x":"`+strings.Repeat("x", 2*maxVersionBytes)+`",`), strings.NewReader(`"gitVersion":"v1"}`)), want: ""},
	} {
		t.Run(name, func(t *testing.T) {
			if got := readGitVersion(tc.body); got != tc.want {
				t.Errorf("readGitVersion = %q (%d bytes), want %q", got, len(got), tc.want)
			}
			if e, ok := tc.body.(*endless); ok && e.read > 2*maxVersionBytes {
				t.Errorf("read %d bytes of an endless body, want at most about %d", e.read, maxVersionBytes)
			}
		})
	}
}
