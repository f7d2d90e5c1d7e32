// Command fleet-demo runs a local hub, two members and an example
// controller: the fleet manager with the ConfigMap reporter. It is not part
// of the production binary, fleet-manager.
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

// newFlagSet returns a flag set for fleet-<name> that returns its errors,
// and binds the zap logger's flags to zapOpts.
func newFlagSet(name string, stderr io.Writer, zapOpts *zap.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("fleet-"+name, flag.ContinueOnError)
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
