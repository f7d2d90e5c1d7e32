package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

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
	case errors.Is(err, cli.ErrUsage):
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
