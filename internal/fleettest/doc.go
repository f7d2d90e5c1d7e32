// Package fleettest is the one test harness of fleet-manager's packages:
// the API servers of a test binary, fleets started on them, members
// registered and waited for, and what the tests read back (requests,
// log lines, MemberClusters, metrics).
//
// # Setup
//
// A package's TestMain runs its Suite, which starts a hub and
// Suite.MemberCount members (envtest control planes, through
// controlplane.RunTests), installs fleet-manager's CRDs on the hub, builds
// admin clients and kubeconfigs of every API server, and captures the log
// lines of controller-runtime and klog:
//
//	var suite = &fleettest.Suite{MemberCount: 2}
//
//	func TestMain(m *testing.M) { os.Exit(suite.Run(m)) }
//
// Suite.HubCount starts more hubs, each with the CRDs; Suite.Audit has
// every API server log the writes it serves, which Suite.Writes reads.
//
// Without $KUBEBUILDER_ASSETS no API server starts; the tests that need
// them skip themselves (Suite.Need, and every fleet or client helper).
// When the tests end, the suite fails if a log line, or anything its
// fleets published on the hub, holds credential material of its
// kubeconfigs, of kubeconfigtest, of HostileKubeconfig or of
// Suite.Credentials.
//
// # Usage
//
// A test starts a fleet.Manager with Suite.StartFleet, in a fleet
// namespace of its own unless FleetOptions.Namespace shares one, registers
// members with Fleet.Register (a native kubeconfig Secret) and waits with
// Fleet.WaitEngaged or Fleet.WaitState. A Recorder is a reconciler that
// remembers its requests.
//
// # Lifecycle
//
// Everything a helper starts is stopped when its test ends, in this
// order: the manager is stopped and waited for (at most 30 s; a manager
// that does not stop fails the test), then the Secrets registered with
// Fleet.Register, and the MemberClusters labelled with the fleet
// namespace, are deleted, so no later test finds a fleet's cluster-scoped
// leftovers. Member namespaces
// and objects are not removed: each test works in names of its own.
//
// # Parallel tests
//
// The API servers are shared by the tests of a package. A test that calls
// t.Parallel must use its own fleet, its own cluster names (MemberClusters
// are cluster-scoped) and its own member namespaces; the harness keeps
// nothing else shared but the suite's log capture and controller-runtime's
// metrics registry, which every series reads by cluster name.
//
// Where every manager on a hub reads what every fleet published there (the
// Propagations of every namespace), fleets of parallel tests would act on
// each other's objects: such a test takes a hub of its own with
// Suite.OwnHubs, and starts its fleets on it (FleetOptions.Hub). The
// members stay shared: two fleets sharing members do not interfere.
// Within a fleet, tests register one API server under many names, so the
// harness's fleets set fleet.Options.AllowDuplicateClusters; a test of
// the refusal of duplicates unsets it in FleetOptions.Configure.
package fleettest
