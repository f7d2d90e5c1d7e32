// Package e2e is the end-to-end suite of the rollout, baseline and
// sharding promises: it runs the real fleet-manager binary as a user runs
// it (`fleet-manager run` with flags, the CRDs of deploy/crd, members
// registered by their registration Secrets, `fleet-manager cordon` and
// `drain`, SIGKILL and restart) against envtest API servers, and checks
// each promise of docs/rollouts.md, docs/clusterpropagation.md and
// docs/sharding.md in one test that quotes the sentence it checks.
// promises lists them; TestEveryQuotedSentenceIsInTheDocs fails when a
// quoted sentence is no longer in the docs, so the two cannot drift apart.
//
// # Lifecycle
//
// TestMain builds the binary (with -race when the tests are), starts a hub
// and nine member API servers, then starts one manager on the hub, shared by every test but the sharded ones, and stops it
// (SIGTERM, then a check of its log for panics and races) once the tests
// ended. Each test works in a team namespace of its own and registers
// member names of its own, each pointing at a different member API server,
// so that tests run in parallel on shared servers and a test's members at
// different revisions never share an object. The sharded tests run one at a
// time, in a fleet namespace of their own, and start and kill their own
// replicas (`run --shard`). Every process a test starts is killed when it ends.
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
