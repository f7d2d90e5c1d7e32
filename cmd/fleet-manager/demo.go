package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// demoBinary is the demo's program, kept out of this binary so that the
// image links no envtest or local API servers.
const demoBinary = "fleet-demo"

// newDemoCommand returns the demo command, which runs fleet-demo, found
// next to this binary or on $PATH, with the arguments it was given.
func newDemoCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "demo [fleet-demo flags]",
		Short: "Run the demo: a local hub, two members and a fleet-wide reporter, until Ctrl-C",
		Long: `Run the demo: a local hub, two members and a fleet-wide ConfigMap reporter, until
Ctrl-C. The demo is a program of its own, fleet-demo, so that this binary links
no local API servers; "make demo" builds it into bin/ and runs it. This command
runs fleet-demo from beside this binary, else from $PATH, with the same
arguments ("fleet-manager demo -h" shows them).`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := findDemo()
			if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
				if err := cmd.Help(); err != nil || path == "" {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			demo := exec.CommandContext(cmd.Context(), path, args...)
			demo.Stdin, demo.Stdout, demo.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			// Ctrl-C reaches the demo too, which stops on it: wait for it.
			signal.Ignore(os.Interrupt, syscall.SIGTERM)
			defer signal.Reset(os.Interrupt, syscall.SIGTERM)
			err = demo.Run()
			if exitErr, ok := errors.AsType[*exec.ExitError](err); ok {
				return &exitCodeError{code: exitErr.ExitCode()}
			}
			return err
		},
	}
}

// findDemo returns the path of fleet-demo: beside this binary, else on
// $PATH.
func findDemo() (string, error) {
	if self, err := os.Executable(); err == nil {
		path := filepath.Join(filepath.Dir(self), demoBinary)
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	path, err := exec.LookPath(demoBinary)
	if err != nil {
		return "", fmt.Errorf("%s is neither beside fleet-manager nor on $PATH: run \"make demo\" in the repository, which builds it into bin/ and runs it", demoBinary)
	}
	return path, nil
}

// exitCodeError makes fleet-manager exit with code, printing nothing more:
// what was to say is said (a refused kubeconfig's verdict, the demo's own
// output).
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.code) }
