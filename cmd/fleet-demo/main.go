// Command fleet-demo runs a local hub and two members, each a local
// kube-apiserver and etcd, and a fleet manager with the ConfigMap reporter
// (pkg/controllers/configmapreport), until Ctrl-C.
//
// Usage:
//
//	fleet-demo [flags]
//
// -exit-when-done exits once every member's ConfigMap was reconciled
// (within -timeout). The logs go to stderr through controller-runtime's
// zap logger (see the --zap-* flags), at error level unless
// --zap-log-level says otherwise; the demo's own sentences go to stdout.
//
// The demo needs kube-apiserver and etcd in $KUBEBUILDER_ASSETS, which
// `make demo` builds into bin/. It is a program of its own so that the
// production binary, fleet-manager, does not link envtest and the local
// API servers. The exit code is 0 on a clean stop, 1 on an error and 2 on
// bad usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/fleetkube/fleet-manager/internal/cli"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// cli.ErrUsage reports bad usage whose message was already printed.

func main() {
	os.Exit(execute(os.Args[1:], os.Stderr))
}

// execute runs the demo with args and returns the exit code.
func execute(args []string, stderr io.Writer) int {
	err := demoCommand(args, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, cli.ErrUsage):
		return exitUsage
	default:
		fmt.Fprintf(stderr, "fleet-demo: %v\n", err)
		return exitError
	}
}
