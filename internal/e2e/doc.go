// Package e2e is the end-to-end suite of the rollout, baseline and
// sharding promises: it runs the real fleet-manager binary as a user runs
// it (`fleet-manager run` with flags, the CRDs of deploy/crd, members
// registered by their registration Secrets, `fleet-manager cordon` and
// `drain`, SIGKILL and restart) against envtest API servers, and checks
// each promise of docs/rollouts.md, docs/clusterpropagation.md,
// docs/sharding.md and docs/propagation.md (whose copies) in one test
// that quotes the sentence it checks.
// promises lists them; TestEveryQuotedSentenceIsInTheDocs fails when a
// quoted sentence is no longer in the docs, so the two cannot drift apart.
//
// # Lifecycle
//
// TestMain builds the binary (with -race when the tests are) and starts a
// hub and nine member API servers. Each test runs a fleet of its own: a
// fleet namespace on the hub, its own `fleet-manager run` (or replicas,
// `run --shard`), its members registered once each, one per member API
// server, and a team namespace of its own, whose Propagations carry the
// fleet's label (fleet.fleetkube.io/fleet) so that no other fleet claims
// them. Fleets share the hub and the member servers as separate fleets
// do, so tests run in parallel and never touch each other's copies. Every
// process a test starts is stopped (SIGTERM) or killed when it ends, and
// its log checked for panics and races.
//
// # Verdicts
//
// Guards are judged from the members' own state, sampled every 50 ms: the
// copies' content in each member, read before the hub's record of who is
// given what. A verdict never rests on a sleep: each test waits for
// evidence (the rollout record, status.observedGeneration) and then checks.
//
// It holds tests only.
package e2e
