// Command fleet-demo runs a local hub and two members, each a local
// kube-apiserver and etcd, and a fleet manager with the ConfigMap reporter
// (pkg/controllers/configmapreport) and the Propagation controller, until
// Ctrl-C or SIGTERM.
//
// Usage:
//
//	fleet-demo [flags]
//
// Once the members are Ready, it walks through a Propagation: a hub
// ConfigMap copied to both members, an override giving each copy its
// member's name, an edit of a copy corrected, and the copies removed when the ConfigMap loses its label. Then it prints a cluster admin's kubeconfig of the hub
// and of each member (in a temporary directory removed when it stops),
// each member's kube-apiserver PID, and kubectl commands to try. Then it
// says each reconcile and each member's state change, one line each.
//
// -exit-when-done exits once the fleet is up (within -timeout). The logs
// go to stderr through controller-runtime's zap logger (see the --zap-*
// flags), at error level unless --zap-log-level says otherwise; the demo's
// own sentences go to stdout.
//
// The demo needs kube-apiserver and etcd in $KUBEBUILDER_ASSETS, which
// `make demo` builds into bin/. It is a program of its own so that the
// production binary, fleet-manager, does not link envtest and the local
// API servers. The exit code is 0 on a clean stop, Ctrl-C and SIGTERM
// included, 1 on an error and 2 on bad usage.
package main

import (
	"io"
	"os"

	"github.com/fleetkube/fleet-manager/internal/cli"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stderr))
}

// execute runs the demo with args and returns the exit code.
func execute(args []string, stderr io.Writer) int {
	err := demoCommand(args, stderr)
	return cli.ExitCode("fleet-demo", err, stderr)
}
