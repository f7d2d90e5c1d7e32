// Package manifests tests what deploy/ and charts/fleet-manager install,
// with tools the manager does not need: Helm's Go library, which renders
// the chart to compare it with the kustomize rendering of deploy/, and
// Prometheus's promtool (built into bin/ by hack/promtool.sh), which runs
// the alerts' rule tests. A module of its own, so that neither enters the
// manager's go.mod.
package manifests
