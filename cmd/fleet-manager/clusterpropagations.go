package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// getClusterPropagationsCommand returns "get clusterpropagations".
func getClusterPropagationsCommand(hub *hubFlags, clk clock.PassiveClock) *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:     "clusterpropagations [NAME...]",
		Aliases: []string{"clusterpropagation", "clusterprop"},
		Short:   "List the ClusterPropagations, as kubectl get does",
		Long: `List the ClusterPropagations, which propagate cluster-scoped objects, as a
table of their member counts, or as -o asks. -o wide adds the members that
owe deletions and those not applied and available, with their result and
reason.`,
		Example: `  fleet-manager get clusterpropagations
  fleet-manager get clusterprop baseline -o yaml`,
		ValidArgsFunction: completeClusterPropagations(hub),
	}
	out := bindOutputFlags(cmd, true)
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "Label selector to filter ClusterPropagations on.")
	cmd.RunE = func(cmd *cobra.Command, names []string) error {
		p, err := out.toPrinter(false)
		if err != nil {
			return err
		}
		sel, err := namesOrSelector(names, selector)
		if err != nil {
			return err
		}
		c, err := hub.client()
		if err != nil {
			return err
		}
		items, getErr := getClusterPropagations(cmd.Context(), c, names, sel)
		if getErr != nil && len(items) == 0 {
			return getErr
		}
		if len(items) == 0 && p.rows != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "No ClusterPropagations found.")
			return nil
		}
		props := make([]fleetv1alpha1.Propagation, len(items))
		for i := range items {
			props[i] = asPropagation(&items[i])
		}
		if err := printPropagationRows(cmd, p, props, asObjects(items), len(names) == 1, clk.Now()); err != nil {
			return err
		}
		return getErr
	}
	return cmd
}

// asPropagation is cp as the Propagation of no namespace it is to the
// manager, for the Propagation's table and summary.
func asPropagation(cp *fleetv1alpha1.ClusterPropagation) fleetv1alpha1.Propagation {
	return fleetv1alpha1.Propagation{ObjectMeta: cp.ObjectMeta, Spec: cp.Spec, Status: cp.Status}
}

// getClusterPropagations returns the ClusterPropagations names, or every
// one sel matches, sorted by name. With names, it returns those it found
// and an error naming the others.
func getClusterPropagations(ctx context.Context, c client.Client, names []string, sel labels.Selector) ([]fleetv1alpha1.ClusterPropagation, error) {
	if len(names) == 0 {
		var list fleetv1alpha1.ClusterPropagationList
		if err := c.List(ctx, &list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, propagationReadError(err)
		}
		slices.SortFunc(list.Items, func(a, b fleetv1alpha1.ClusterPropagation) int { return strings.Compare(a.Name, b.Name) })
		return list.Items, nil
	}
	return getNamed(names, errNoPropagationCRD, func(name string) (fleetv1alpha1.ClusterPropagation, error) {
		var cp fleetv1alpha1.ClusterPropagation
		return cp, propagationReadError(c.Get(ctx, client.ObjectKey{Name: name}, &cp))
	})
}

// clusterPropagationStatusCommand returns "status clusterpropagation NAME".
func clusterPropagationStatusCommand(hub *hubFlags, clk clock.PassiveClock) *cobra.Command {
	cmd := &cobra.Command{
		Use:               "clusterpropagation NAME",
		Aliases:           []string{"clusterpropagations", "clusterprop"},
		Short:             "Show where a ClusterPropagation stands: its spec, counts, rollout, conditions, and each member not applied and available",
		Args:              exactArgs(1, "a ClusterPropagation NAME"),
		ValidArgsFunction: completeOnlyFirst(completeClusterPropagations(hub)),
	}
	out := bindOutputFlags(cmd, false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		p, err := out.toPrinter(false)
		if err != nil {
			return err
		}
		c, err := hub.client()
		if err != nil {
			return err
		}
		var cp fleetv1alpha1.ClusterPropagation
		if err := c.Get(cmd.Context(), client.ObjectKey{Name: args[0]}, &cp); err != nil {
			return propagationReadError(err)
		}
		if !p.view {
			return p.printObjects(cmd.OutOrStdout(), []client.Object{&cp}, true)
		}
		prop := asPropagation(&cp)
		return printPropagationStatus(cmd.OutOrStdout(), &prop, clk.Now())
	}
	return cmd
}

// completeClusterPropagations completes the ClusterPropagations' names.
func completeClusterPropagations(hub *hubFlags) cobra.CompletionFunc {
	return completeNames(hub, func(ctx context.Context, c client.Client) ([]string, error) {
		var list fleetv1alpha1.ClusterPropagationList
		err := c.List(ctx, &list)
		names := make([]string, len(list.Items))
		for i, cp := range list.Items {
			names[i] = cp.Name
		}
		return names, err
	})
}
