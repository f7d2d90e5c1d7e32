package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fleetkube/fleet-manager/internal/cli"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the subcommand args name, "run" if none, and returns the
// exit code. --version alone is the version command.
func execute(args []string, stdout, stderr io.Writer) int {
	name := "run"
	switch {
	case len(args) == 1 && (args[0] == "--version" || args[0] == "-version"):
		name, args = "version", nil
	case len(args) > 0 && !strings.HasPrefix(args[0], "-"):
		name, args = args[0], args[1:]
	}
	var err error
	switch name {
	case "run":
		err = runCommand(args, stderr)
	case "version":
		err = versionCommand(args, stdout, stderr)
	case "help":
		printUsage(stderr)
		return cli.ExitOK
	default:
		fmt.Fprintf(stderr, "fleet-manager: unknown command %q\n\n", name)
		printUsage(stderr)
		return cli.ExitUsage
	}
	return cli.ExitCode("fleet-manager "+name, err, stderr)
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  fleet-manager [run] [flags]   run the fleet manager against a hub (the default)
  fleet-manager version         print the version, the commit and the Go version (also --version)

Run "fleet-manager <command> -h" for the flags of a command.
`)
}
