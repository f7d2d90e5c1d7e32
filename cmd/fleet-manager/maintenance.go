package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// newCordonCommand returns "cordon NAME...".
func newCordonCommand(hub *hubFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cordon NAME...",
		Short: "Take members out of rollouts: they take no new revision and no new Propagation",
		Long: `Cordon members: set their spec.maintenance to Cordon, and they take no new
revision and no new Propagation; the copies they have stay, kept as their
revision says. A rollout counts them out: it completes without them.
"fleet-manager uncordon" gives them back.`,
		Example: `  fleet-manager cordon eu-1
  fleet-manager cordon eu-1 eu-2`,
	}
	return maintenanceCommand(cmd, hub, fleetv1alpha1.MaintenanceCordon, "cordoned")
}

// newUncordonCommand returns "uncordon NAME...".
func newUncordonCommand(hub *hubFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "uncordon NAME...",
		Short: "Put cordoned or drained members back into rollouts",
		Long: `Uncordon members: remove their spec.maintenance, and they take the revisions
rolled out again, as the Propagations' strategies say; a drained member is
given its copies back.`,
		Example: `  fleet-manager uncordon eu-1`,
	}
	return maintenanceCommand(cmd, hub, "", "uncordoned")
}

// maintenanceCommand makes cmd set its members' spec.maintenance to mode,
// saying done of each.
func maintenanceCommand(cmd *cobra.Command, hub *hubFlags, mode fleetv1alpha1.MaintenanceMode, done string) *cobra.Command {
	cmd.Args = minArgs(1, "a member NAME")
	cmd.ValidArgsFunction = completeMembers(hub)
	cmd.RunE = func(cmd *cobra.Command, names []string) error {
		c, err := hub.client()
		if err != nil {
			return err
		}
		var errs []error
		for _, name := range names {
			changed, err := setMaintenance(cmd.Context(), c, name, mode)
			switch {
			case err != nil:
				errs = append(errs, err)
			case changed:
				fmt.Fprintf(cmd.OutOrStdout(), "membercluster/%s %s\n", name, done)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "membercluster/%s already %s\n", name, done)
			}
		}
		return joinLine(errs)
	}
	return cmd
}

// minArgs wants n positional arguments or more, named names in its
// message.
func minArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErrorf("%s wants %s", cmd.CommandPath(), names)
		}
		return nil
	}
}

// setMaintenance merge-patches the member name's spec.maintenance to
// mode, or removes it if mode is empty; it reports false, and patches
// nothing, when mode is the member's already.
func setMaintenance(ctx context.Context, c client.Client, name string, mode fleetv1alpha1.MaintenanceMode) (bool, error) {
	var mc fleetv1alpha1.MemberCluster
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &mc); err != nil {
		return false, hubReadError(err)
	}
	if mc.Spec.Maintenance == mode {
		return false, nil
	}
	value := any(mode)
	if mode == "" {
		value = nil
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"maintenance": value}})
	if err != nil {
		return false, err
	}
	return true, hubReadError(c.Patch(ctx, &mc, client.RawPatch(types.MergePatchType, patch)))
}

// newDrainCommand returns "drain NAME...".
func newDrainCommand(hub *hubFlags) *cobra.Command {
	var (
		wait    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "drain NAME...",
		Short: "Remove every Propagation's copies from members, within the disruption budgets, and wait until they are gone",
		Long: `Drain members: set their spec.maintenance to Drain, and they are cordoned and
every Propagation's copies are removed from them, as far as each
Propagation's disruption budget lets the manager at a time. Then wait, as
kubectl drain does, until each member's status says no Propagation's copies
are left (drain.remaining 0) and its Drained condition is True, printing what
the drain waits for each time that changes. "fleet-manager uncordon" gives
the copies back.`,
		Example: `  fleet-manager drain eu-1
  fleet-manager drain eu-1 eu-2 --timeout=15m
  fleet-manager drain eu-1 --wait=false`,
		Args:              minArgs(1, "a member NAME"),
		ValidArgsFunction: completeMembers(hub),
	}
	cmd.Flags().BoolVar(&wait, "wait", true, "Wait until the members are drained. With --wait=false, return once their maintenance is set.")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "How long to wait for each member to drain before giving up, such as 15m; 0 waits for ever.")
	cmd.RunE = func(cmd *cobra.Command, names []string) error {
		if timeout < 0 {
			return usageErrorf("--timeout must not be negative")
		}
		c, err := hub.client()
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		var draining []string
		var errs []error
		for _, name := range names {
			changed, err := setMaintenance(cmd.Context(), c, name, fleetv1alpha1.MaintenanceDrain)
			switch {
			case err != nil:
				errs = append(errs, err)
				continue
			case changed:
				fmt.Fprintf(out, "membercluster/%s draining\n", name)
			default:
				fmt.Fprintf(out, "membercluster/%s already draining\n", name)
			}
			draining = append(draining, name)
		}
		if !wait {
			return joinLine(errs)
		}
		for _, name := range draining {
			err := waitUntil(cmd.Context(), out, timeout, "membercluster/"+name+" to drain", func(ctx context.Context) (string, bool, error) {
				var mc fleetv1alpha1.MemberCluster
				if err := c.Get(ctx, client.ObjectKey{Name: name}, &mc); err != nil {
					return "", false, hubReadError(err)
				}
				return drainProgress(&mc)
			})
			if err != nil {
				errs = append(errs, err)
			}
		}
		return joinLine(errs)
	}
	return cmd
}

// drainProgress says where mc's drain stands, and whether it is done; a
// member whose maintenance is no longer Drain is an error.
func drainProgress(mc *fleetv1alpha1.MemberCluster) (string, bool, error) {
	d := mc.Status.Drain
	switch {
	case mc.Spec.Maintenance != fleetv1alpha1.MaintenanceDrain:
		return "", false, fmt.Errorf("membercluster/%s is no longer drained: its maintenance is %s now", mc.Name, orNone(string(mc.Spec.Maintenance)))
	case d == nil:
		return fmt.Sprintf("Waiting for membercluster/%s to drain", mc.Name), false, nil
	case d.Remaining == 0 && meta.IsStatusConditionTrue(mc.Status.Conditions, fleetv1alpha1.ConditionDrained):
		return fmt.Sprintf("membercluster/%s drained", mc.Name), true, nil
	}
	return fmt.Sprintf("Waiting for membercluster/%s to drain: %s", mc.Name, drainState(d)), false, nil
}

// drainState says how many Propagations' copies a drain has left, and
// what it waits for.
func drainState(d *fleetv1alpha1.DrainStatus) string {
	s := plural(int(d.Remaining), "Propagation") + " left"
	if d.Message != "" {
		s += " (" + oneLine(d.Message) + ")"
	}
	return s
}
