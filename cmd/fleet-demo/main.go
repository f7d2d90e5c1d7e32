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

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// errUsage reports bad usage whose message was already printed.
var errUsage = errors.New("bad usage")

func main() {
	os.Exit(execute(os.Args[1:], os.Stderr))
}

// execute runs the demo with args and returns the exit code.
func execute(args []string, stderr io.Writer) int {
	err := demoCommand(args, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	default:
		fmt.Fprintf(stderr, "fleet-demo: %v\n", err)
		return exitError
	}
}

// newFlagSet returns the command's flag set, which returns its errors, and
// binds the zap logger's flags to zapOpts.
func newFlagSet(stderr io.Writer, zapOpts *zap.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("fleet-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	zapOpts.BindFlags(fs)
	return fs
}

// parse parses args into fs and refuses positional arguments. The flag
// package has already printed what was wrong, with the usage.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		return usageErrorf(fs, "unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// usageErrorf prints a usage error and where to find the usage.
func usageErrorf(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(fs.Output(), "%s: %s\nRun \"%s -h\" for usage.\n", fs.Name(), fmt.Sprintf(format, args...), fs.Name())
	return errUsage
}

// setupLogging makes the logger zapOpts describe controller-runtime's and
// klog's logger, and returns it.
func setupLogging(zapOpts *zap.Options) logr.Logger {
	log := zap.New(zap.UseFlagOptions(zapOpts))
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	return log
}
