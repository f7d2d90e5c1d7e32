package propagation

import (
	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/apply"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation/health"
)

// heldByAvailableWhen holds the run, failed, if an availableWhen of
// resources cannot be used: a spec the manager cannot use neither applies
// nor removes anything, not even the copies of a member it deselects.
func (run *memberRun) heldByAvailableWhen(resources []fleetv1alpha1.ResourceSelector) bool {
	rerr := health.FirstUnusableRule(resources)
	if rerr == nil {
		return false
	}
	run.holdFailed(&kindError{reason: rerr.Reason, message: rerr.Message})
	return true
}

// holdFailed holds the run, failed with kerr: a spec the manager cannot
// use neither applies nor removes anything, and the status says why.
func (run *memberRun) holdFailed(kerr *kindError) {
	run.held = &apply.Failure{Reason: kerr.reason, Message: kerr.message}
	run.Fail(*run.held)
}
