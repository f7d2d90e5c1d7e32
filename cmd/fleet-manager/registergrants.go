package main

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/enroll"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// newGrantsCommand returns "grants", whose one command is sync.
func newGrantsCommand(hub *hubFlags) *cobra.Command {
	grants := &cobra.Command{
		Use:   "grants",
		Short: "Keep the rights register --permissions=fleet granted in the members up to the fleet's Propagations",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("%s wants a command: sync", cmd.CommandPath())
		},
	}
	grants.AddCommand(newGrantsSyncCommand(hub))
	return grants
}

// newGrantsSyncCommand returns "grants sync [NAME...]".
func newGrantsSyncCommand(hub *hubFlags) *cobra.Command {
	var (
		kubeconfig, namespace, dryRun, output string
		contexts                              map[string]string
	)
	cmd := &cobra.Command{
		Use:   "sync [NAME...]",
		Short: "Grant each member what the fleet's Propagations copy now (register --permissions=fleet's rules)",
		Long: `Bring the rights that "register --permissions=fleet" granted in each member up
to what the hub's Propagations copy now: the ClusterRole fleet-manager:fleet
(and, for a member registered with --namespaces, the Role fleet-manager:fleet in
each of those namespaces) gets the rules register would write today, the
kinds of every Propagation, with the same exclusions (cluster-scoped kinds,
RBAC kinds, Secrets without --namespaces, kinds the member does not serve).
Nothing else changes: not the ServiceAccount, not the token, not the hub.

Run it when a Propagation copies a kind the members do not grant yet; a member
that forbids the manager a kind says so in the Propagation's status, naming
this command. The manager uses a new grant within seconds, without a restart.

It reaches each member as register does, through your own kubeconfig
(--member-kubeconfig, default $KUBECONFIG and ~/.kube/config) with credentials
that may write RBAC there: the context named like the member, or the one
--member-context NAME=CONTEXT names. Without NAME, it syncs every member of
the fleet. A member registered with another preset or ClusterRole is skipped
and said so; one it cannot reach or write fails, and the command exits 1
after trying the others. --dry-run prints each member's rules, and writes
nothing.`,
		Example: `  fleet-manager grants sync --dry-run
  fleet-manager grants sync
  fleet-manager grants sync eu-1 --member-context=eu-1=admin@eu-1
  fleet-manager grants sync --dry-run -o yaml`,
		ValidArgsFunction: completeMembers(hub),
		RunE: func(cmd *cobra.Command, names []string) error {
			mode := enroll.DryRun(dryRun)
			switch {
			case !slices.Contains([]enroll.DryRun{enroll.DryRunNone, enroll.DryRunClient, enroll.DryRunServer}, mode):
				return usageErrorf("--dry-run must be none, client or server, not %q", dryRun)
			case !slices.Contains([]string{"", "yaml"}, output):
				return usageErrorf("--output must be yaml, not %q", output)
			}
			for _, name := range names {
				if err := registry.ValidateName(name); err != nil {
					return usageErrorf("%v", err)
				}
			}
			for name := range contexts {
				if len(names) > 0 && !slices.Contains(names, name) {
					return usageErrorf("--member-context names %s, which is not among the members to sync", name)
				}
			}
			hubClient, err := hub.client()
			if err != nil {
				return err
			}
			if len(names) == 0 {
				if names, err = fleetMembers(cmd, hubClient, namespace); err != nil {
					return err
				}
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			suffix := map[enroll.DryRun]string{enroll.DryRunClient: " (dry run)", enroll.DryRunServer: " (server dry run)"}[mode]
			var failed []string
			var objs []client.Object
			for _, name := range names {
				kubeContext := name
				if c, ok := contexts[name]; ok {
					kubeContext = c
				}
				cfg, err := personConfig("member", kubeconfig, kubeContext, os.Stdin)
				if err != nil {
					fmt.Fprintf(errOut, "%s: %v; name its context with --member-context=%s=CONTEXT\n", name, err, name)
					failed = append(failed, name)
					continue
				}
				g, err := enroll.SyncGrants(cmd.Context(), cfg, hubClient, namespace, name, mode)
				switch {
				case errors.Is(err, enroll.ErrNotFleetPreset):
					fmt.Fprintf(out, "%s: skipped: %v\n", name, err)
					continue
				case err != nil:
					fmt.Fprintf(errOut, "%s: %v\n", name, memberError(err))
					failed = append(failed, name)
					continue
				}
				for _, w := range g.Rights.Skipped {
					fmt.Fprintf(errOut, "Warning: %s: %s\n", name, w)
				}
				for _, c := range g.Member {
					objs = append(objs, c.Object)
					if output == "" {
						fmt.Fprintf(out, "%s: %s %s%s\n", name, enroll.Describe(c.Object), c.Op, suffix)
						printRules(out, c.Object)
					}
				}
			}
			if output == "yaml" {
				if err := enroll.WriteYAML(out, objs); err != nil {
					return err
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("%d of %d members not synced: %v", len(failed), len(names), failed)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "member-kubeconfig", "", "Path to your kubeconfig of the members. Default: $KUBECONFIG and the default loading rules. Its credentials are used only to reach the members, never copied.")
	fs.StringToStringVar(&contexts, "member-context", nil, "NAME=CONTEXT: the context of your member kubeconfig that reaches member NAME (repeatable). Default: the context named like the member.")
	fs.StringVar(&namespace, "namespace", enroll.MemberNamespace, "The fleet namespace on the hub.")
	fs.StringVar(&dryRun, "dry-run", string(enroll.DryRunNone), `"none", "client" (print each member's rules, and write nothing) or "server" (send the writes with dryRun=All). --dry-run alone is client.`)
	fs.Lookup("dry-run").NoOptDefVal = string(enroll.DryRunClient)
	fs.StringVarP(&output, "output", "o", "", `"yaml": print the ClusterRoles, Roles and bindings written (or that would be).`)
	return cmd
}

// fleetMembers names the members of the fleet of namespace ns: its
// MemberClusters, sorted.
func fleetMembers(cmd *cobra.Command, hub client.Client, ns string) ([]string, error) {
	var list fleetv1alpha1.MemberClusterList
	if err := hub.List(cmd.Context(), &list, client.MatchingLabels{fleetv1alpha1.FleetLabel: ns}); err != nil {
		return nil, hubReadError(err)
	}
	names := make([]string, 0, len(list.Items))
	for _, mc := range list.Items {
		names = append(names, mc.Name)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("the fleet of namespace %s has no members", ns)
	}
	return names, nil
}
