package propagation_test

import (
	"strings"
	"testing"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/poll"
)

// refusedRevisionLog is the line the manager logs when the hub refuses a
// revision.
const refusedRevisionLog = "The hub refused a new revision"

// TestRefusedRevisionIsLoggedOnce: a revision too large for the hub's
// store is refused; the manager logs that once, however often the
// Propagation is summed up again, and once more when its content
// changes and the hub refuses that too. Members keep getting the hub's
// content meanwhile (strategy All).
func TestRefusedRevisionIsLoggedOnce(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.register(0, "east", map[string]string{"env": "prod"})
	// Two ConfigMaps of 900 KB each: each fits the hub, a revision of both
	// does not (etcd takes 1.5 MiB a request).
	big := strings.Repeat("x", 900_000)
	f.configMap("web-a", map[string]string{"v": big}, map[string]string{"app": "web"})
	f.configMap("web-b", map[string]string{"v": big}, map[string]string{"app": "web"})
	f.propagation("web", nil)
	f.waitCopy(0, "web-b", "applied", exists)
	poll.Until(t, "the refusal logged", func() bool { return f.fleet.Logs.Count(refusedRevisionLog) > 0 })

	for range 3 {
		f.reconciledAgain("web")
	}
	if n := f.fleet.Logs.Count(refusedRevisionLog); n != 1 {
		t.Errorf("the refusal of one revision is logged %d times, want once", n)
	}
	if p := f.waitStatus("web", "summed up", func(*fleetv1alpha1.Propagation) bool { return true }); p.Status.Revision != 0 {
		t.Errorf("status.revision = %d, want none made", p.Status.Revision)
	}

	hub := f.hubConfigMap("web-a")
	hub.Data = map[string]string{"v": strings.Repeat("y", 900_000)}
	if err := f.hub.Client.Update(t.Context(), hub); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the refusal of the new content logged", func() bool { return f.fleet.Logs.Count(refusedRevisionLog) == 2 })
	f.reconciledAgain("web")
	if n := f.fleet.Logs.Count(refusedRevisionLog); n != 2 {
		t.Errorf("the refusals of two contents are logged %d times, want twice", n)
	}
}
