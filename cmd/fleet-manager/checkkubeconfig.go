package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/fleetkube/fleet-manager/internal/cli"
	"github.com/fleetkube/fleet-manager/pkg/kubeconfig"
)

// newCheckKubeconfigCommand returns "check-kubeconfig FILE|-", which runs
// the manager's kubeconfig policy on a file and prints its verdict.
func newCheckKubeconfigCommand() *cobra.Command {
	var policy kubeconfig.Policy
	cmd := &cobra.Command{
		Use:   "check-kubeconfig FILE|-",
		Short: "Check a member kubeconfig against the manager's policy, without using it",
		Long: `check-kubeconfig runs the policy the manager applies to every member kubeconfig on
FILE, or on standard input with "-", and prints whether the manager would accept it
and, if not, why. It never connects to the server, never reads a file the
kubeconfig names and never runs its exec plugin. It exits 0 when the kubeconfig is
accepted, 1 when it is refused.`,
		Example: `  fleet-manager check-kubeconfig member.kubeconfig
  kubectl get secret -n fleet-system east -o jsonpath='{.data.kubeconfig}' | base64 -d | fleet-manager check-kubeconfig -
  fleet-manager check-kubeconfig --allow-exec-plugin=aws eks.kubeconfig`,
		Args: exactArgs(1, "one FILE, or - for standard input"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkPolicyFlags(policy); err != nil {
				return err
			}
			data, err := readKubeconfig(cmd, args[0])
			if err != nil {
				return err
			}
			var cfg *rest.Config
			if len(data) > kubeconfig.MaxKubeconfigBytes {
				err = kubeconfig.Refuse("KubeconfigTooLarge", "kubeconfig is over the limit of %d bytes", kubeconfig.MaxKubeconfigBytes)
			} else {
				cfg, err = policy.Parse(data)
			}
			out := cmd.OutOrStdout()
			if err != nil {
				fmt.Fprintf(out, "refused: %v\n", err)
				return &exitCodeError{code: cli.ExitError}
			}
			_, err = fmt.Fprintf(out, "accepted: server %s, credentials %s\n", serverURL(cfg), kubeconfig.DescribeCredential(cfg).Type)
			return err
		},
	}
	bindPolicyFlags(cmd.Flags(), &policy)
	return cmd
}

// readKubeconfig reads the kubeconfig at path, or standard input for "-":
// no more than one byte over what the policy accepts, so that a bigger one
// is refused without it all in memory (and without the policy quoting the
// size of what was read, not of the file).
func readKubeconfig(cmd *cobra.Command, path string) ([]byte, error) {
	r := cmd.InOrStdin()
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, kubeconfig.MaxKubeconfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return data, nil
}

// serverURL is cfg's server without any user info, which could hold a
// password.
func serverURL(cfg *rest.Config) string {
	s, err := kubeconfig.WithoutUserinfo(cfg.Host)
	if err != nil {
		return "<unparsable>"
	}
	return s
}
