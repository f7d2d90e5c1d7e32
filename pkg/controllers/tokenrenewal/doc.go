// Package tokenrenewal is the built-in controller that describes every
// member's credential and renews the service account tokens it can.
//
// # What it does
//
// For each cluster the registry accepts, it publishes what the kubeconfig's
// credential is (type, expiry, renewals), never the credential itself, in
// Options.Credentials ([NewCredentials]), which the MemberCluster
// controller shows; and the series
// fleet_member_credential_expiry_timestamp_seconds. It renews a service
// account token with an expiry, in a native registration Secret: at about
// Options.RenewAfter of its lifetime it asks the member, through the
// member's own client and only while the member runs that very kubeconfig,
// for a new token for the same service account, as long-lived as the old
// one up to a day, and writes it into the Secret with a resourceVersion
// precondition. The member takes it in place, like any rotation. Failed
// renewals are retried with backoff; a credential past Options.WarnAfter
// of its lifetime is published expiring. Options.Disabled renews nothing
// and still describes.
//
// # Lifecycle
//
// [Add] adds it to a fleet.Manager; it runs on the leader, follows the
// registry (a level-triggered stream, so it converges however late it
// starts) and wakes again at each credential's next due time. A cluster
// that is removed or refused has its credential and series forgotten.
package tokenrenewal
