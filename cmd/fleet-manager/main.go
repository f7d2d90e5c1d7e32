package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

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

// execute runs the subcommand args name, "run" if none, and returns the
// exit code.
func execute(args []string, stderr io.Writer) int {
	name := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	var err error
	switch name {
	case "run":
		err = runCommand(args, stderr)
	case "help":
		printUsage(stderr)
		return exitOK
	default:
		fmt.Fprintf(stderr, "fleet-manager: unknown command %q\n\n", name)
		printUsage(stderr)
		return exitUsage
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsage):
		return exitUsage
	default:
		fmt.Fprintf(stderr, "fleet-manager %s: %v\n", name, err)
		return exitError
	}
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  fleet-manager [run] [flags]   run the fleet manager against a hub (the default)

Run "fleet-manager <command> -h" for the flags of a command.
`)
}

// newFlagSet returns a flag set for the subcommand name that returns its
// errors, and binds the zap logger's flags to zapOpts.
func newFlagSet(name string, stderr io.Writer, zapOpts *zap.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("fleet-manager "+name, flag.ContinueOnError)
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
