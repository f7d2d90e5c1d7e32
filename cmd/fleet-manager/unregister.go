package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/fleetkube/fleet-manager/pkg/registry"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/fleetkube/fleet-manager/internal/enroll"
)

// newUnregisterCommand returns "unregister NAME".
func newUnregisterCommand(hub *hubFlags) *cobra.Command {
	var (
		memberFlags memberFlags
		namespace   string
		wait        time.Duration
		cleanup     bool
		keepCopies  bool
	)
	cmd := &cobra.Command{
		Use:   "unregister NAME",
		Short: "Remove a member cluster from the fleet",
		Long: `Remove the member cluster NAME from the fleet: delete its registration
Secret on the hub (only a native one, labelled fleet.fleetkube.io/kubeconfig=true)
and wait until the manager has removed its MemberCluster.

With --cleanup, it then also deletes, in the member, what "fleet-manager register"
created there for this fleet: the objects labelled app.kubernetes.io/managed-by=fleet-manager,
fleet.fleetkube.io/cluster-name=NAME and fleet.fleetkube.io/fleet-id with the
fleet's identity, and nothing else; objects an earlier register made without a
fleet identity only when the deleted Secret pointed at this member. The namespace
fleet-system goes only when it is the fleet's and holds nothing else.

First it deletes the copies the fleet's Propagations made in the member: the
objects, of the kinds the hub's Propagations copy (their resources and the
kinds their status lists), labelled fleet.fleetkube.io/propagation and
fleet.fleetkube.io/fleet-id with the fleet's identity, in every namespace (in
the Propagations' namespaces if you may not list cluster-wide). Namespaces the
manager created for them are left. With --keep-copies, it leaves the copies,
still labelled as copies, and names them. What it keeps, it names with the
reason. Without --cleanup, the member is left untouched.`,
		Example: `  fleet-manager unregister eu-1
  fleet-manager unregister eu-1 --cleanup --member-context=eu-1
  fleet-manager unregister eu-1 --cleanup --keep-copies`,
		Args:              exactArgs(1, "NAME"),
		ValidArgsFunction: completeMember(hub),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := registry.ValidateName(name); err != nil {
				return err
			}
			var memberCfg *rest.Config
			if cleanup {
				var err error
				if memberCfg, err = memberFlags.restConfig(); err != nil {
					return err
				}
			} else if cmd.Flags().Changed("member-kubeconfig") || cmd.Flags().Changed("member-context") || keepCopies {
				return usageErrorf("--member-kubeconfig, --member-context and --keep-copies only matter with --cleanup")
			}
			hubClient, err := hub.client()
			if err != nil {
				return err
			}
			fleetID := ""
			if cleanup {
				if fleetID, err = enroll.ReadFleetID(cmd.Context(), hubClient, namespace); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			s, err := enroll.Unregister(cmd.Context(), hubClient, namespace, name)
			switch {
			case errors.Is(err, enroll.ErrNotRegistered) && cleanup:
				fmt.Fprintf(cmd.ErrOrStderr(), "Warning: %v; cleaning up the member anyway\n", err)
			case err != nil:
				return err
			default:
				fmt.Fprintf(out, "hub: %s deleted\n", enroll.Describe(s))
			}
			if wait > 0 {
				// The manager stops using the member before its rights go.
				if err := enroll.WaitGone(cmd.Context(), hubClient, namespace, name, wait); err != nil {
					return err
				}
				fmt.Fprintf(out, "hub: MemberCluster %s is gone\n", name)
			}
			if !cleanup {
				return nil
			}
			copies, warnings, err := enroll.RemoveCopies(cmd.Context(), memberCfg, hubClient, fleetID, keepCopies)
			for _, w := range warnings {
				fmt.Fprintf(cmd.ErrOrStderr(), "Warning: %s\n", w)
			}
			for _, c := range copies {
				fmt.Fprintf(out, "member: %s %s: %s\n", enroll.Describe(c.Object), c.Op, c.Reason)
			}
			if err != nil {
				return memberError(err)
			}
			if len(copies) == 0 && len(warnings) == 0 {
				fmt.Fprintln(out, "member: no copy of this fleet's Propagations found")
			}
			changes, err := enroll.Cleanup(cmd.Context(), memberCfg, name, fleetID, s)
			for _, c := range changes {
				if c.Op == "kept" {
					fmt.Fprintf(out, "member: %s kept: %s\n", enroll.Describe(c.Object), c.Reason)
					continue
				}
				fmt.Fprintf(out, "member: %s %s\n", enroll.Describe(c.Object), c.Op)
			}
			if err != nil {
				return memberError(err)
			}
			if len(changes) == 0 {
				fmt.Fprintf(out, "member: nothing of %s to delete\n", name)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	memberFlags.bindFlags(fs)
	fs.StringVar(&namespace, "namespace", enroll.MemberNamespace, "The fleet namespace on the hub, where the registration Secret is.")
	fs.DurationVar(&wait, "wait", 2*time.Minute, "How long to wait for the MemberCluster to go; 0 does not wait.")
	fs.BoolVar(&cleanup, "cleanup", false, "Also delete, in the member, what register created there and the fleet's propagated copies (needs --member-kubeconfig/--member-context, or the default kubeconfig, to reach it).")
	fs.BoolVar(&keepCopies, "keep-copies", false, "With --cleanup, leave the fleet's propagated copies in the member, still labelled as copies, and name them.")
	return cmd
}
