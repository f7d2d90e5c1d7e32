package registry

import (
	"crypto/sha256"
	"time"
)

// Registration is a member cluster as a Secret registers it. Kubeconfig is
// untrusted: the pool's kubeconfig.Policy checks it when the member is built.
type Registration struct {
	ClusterName string
	Kubeconfig  []byte
}

// ProbeResult is the outcome of one probe.
type ProbeResult struct {
	Time     time.Time
	Duration time.Duration
	Err      error
	// CredentialsRejected is true for a 401 or 403.
	CredentialsRejected bool
	// Busy is true for a probe that timed out while the member kept
	// sending on its connections: it counts as a success, and Err is nil.
	Busy bool
	// Excused is true for a probe that timed out, Err, but proves nothing
	// of the member: this process noticed the timeout late, or the member
	// is connecting and sent something within an Interval. It changes
	// neither the state nor ConsecutiveFailures.
	Excused bool
	// ConsecutiveFailures counts the failed probes in a row, this one
	// included; 0 after a success.
	ConsecutiveFailures int
	// Kubeconfig is the SHA-256 of the kubeconfig whose credentials the
	// member last reviewed (SelfSubjectReview) with: in this probe, or
	// before the PING this probe was; zero before the first review.
	Kubeconfig [sha256.Size]byte
}
