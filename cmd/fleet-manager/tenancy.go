package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/tenancy"
)

// shownInCell is how many names a cell of the tenancy tables lists; the
// others are counted.
const shownInCell = 3

// tenancyFlags say which fleet, and which run --tenancy, the tenancy views
// speak of.
type tenancyFlags struct {
	fleetNamespace string
	mode           string
}

func (f *tenancyFlags) bindFlags(cmd *cobra.Command, hub *hubFlags) {
	fs := cmd.Flags()
	fs.StringVar(&f.fleetNamespace, "fleet-namespace", fleet.DefaultNamespace, "The fleet namespace on the hub: the manager's --namespace, whose fleet-identity ConfigMap says whether --tenancy=Auto enforces.")
	fs.StringVar(&f.mode, "tenancy", fleetv1alpha1.TenancyAuto, "The manager's --tenancy: Auto, Enforce or Off. Enforce shows what the TenancyPolicies let, whatever the fleet's mode.")
	_ = cmd.RegisterFlagCompletionFunc("fleet-namespace", completeNamespaces(hub))
	completeWith(cmd, "tenancy", func() []string {
		return []string{fleetv1alpha1.TenancyAuto, fleetv1alpha1.TenancyEnforce, fleetv1alpha1.TenancyOff}
	})
}

func (f *tenancyFlags) check() error {
	if _, err := tenancy.Mode(f.mode, nil); err != nil || f.mode == "" {
		return usageErrorf("--tenancy %q: want %s, %s or %s", f.mode, fleetv1alpha1.TenancyAuto, fleetv1alpha1.TenancyEnforce, fleetv1alpha1.TenancyOff)
	}
	return checkNamespaces("fleet-namespace", f.fleetNamespace)
}

// fleetMode is the mode a manager run with f.mode enforces in f's fleet,
// and why, as its identity says. A fleet with no identity yet gets one,
// enforcing tenancy, from its first manager or register.
func (f *tenancyFlags) fleetMode(ctx context.Context, c client.Client) (mode, why string, err error) {
	if f.mode != fleetv1alpha1.TenancyAuto {
		return f.mode, "--tenancy=" + f.mode, nil
	}
	identity := &corev1.ConfigMap{}
	err = c.Get(ctx, client.ObjectKey{Namespace: f.fleetNamespace, Name: fleetv1alpha1.FleetIdentityName}, identity)
	switch {
	case apierrors.IsNotFound(err):
		return fleetv1alpha1.TenancyEnforce, fmt.Sprintf("--tenancy=Auto, and fleet %s has no identity yet: its first manager creates one that enforces tenancy", f.fleetNamespace), nil
	case err != nil:
		return "", "", fmt.Errorf("reading the fleet's identity, ConfigMap %s/%s: %w", f.fleetNamespace, fleetv1alpha1.FleetIdentityName, err)
	}
	mode, err = tenancy.Mode(f.mode, identity)
	if err != nil {
		return "", "", err
	}
	if mode == fleetv1alpha1.TenancyEnforce {
		return mode, fmt.Sprintf("--tenancy=Auto, and fleet %s was created enforcing tenancy", f.fleetNamespace), nil
	}
	return mode, fmt.Sprintf("--tenancy=Auto, and fleet %s was created before tenancy: set --tenancy=Enforce to enforce it", f.fleetNamespace), nil
}

// errNoTenancyCRD: the hub serves no TenancyPolicies.
var errNoTenancyCRD = errors.New("the hub has no TenancyPolicy CRD: apply deploy/crd (kubectl apply -k deploy/)")

// readReach reads every TenancyPolicy into a Reach.
func readReach(ctx context.Context, c client.Client) (*tenancy.Reach, error) {
	var list fleetv1alpha1.TenancyPolicyList
	if err := c.List(ctx, &list); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, errNoTenancyCRD
		}
		return nil, fmt.Errorf("reading the TenancyPolicies: %w", err)
	}
	return tenancy.New(list.Items), nil
}

// ofOtherFleet reports whether mc is labelled as another fleet's member.
func ofOtherFleet(mc *fleetv1alpha1.MemberCluster, fleetNamespace string) bool {
	ns, ok := mc.Labels[fleetv1alpha1.FleetLabel]
	return ok && ns != fleetNamespace
}

// bounded lists the first shownInCell of names, and counts the others.
func bounded(names []string) string {
	if len(names) <= shownInCell {
		return orNone(strings.Join(names, ", "))
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shownInCell], ", "), len(names)-shownInCell)
}

// reachColumns are the columns of get members --namespace.
var reachColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name"},
	{Name: "Reached", Type: "string", Description: "Whether the namespace's Propagations may reach the member: Yes, No, or Unknown while a policy for it does not parse"},
	{Name: "Kinds", Type: "string", Description: "The kinds they may carry there, per policy"},
	{Name: "Policies", Type: "string", Description: "The TenancyPolicies that let the namespace reach the member"},
	{Name: "Source", Type: "string", Priority: 1, Description: "Where the member is registered from, as TenancyPolicy sources name it: its registration Secret's namespace, or clusterprofile/<namespace>"},
	{Name: "Reason", Type: "string", Priority: 1, Description: "Why the member is not reached"},
}

// reachTable is what namespace ns may reach of items, in mode.
func reachTable(reach *tenancy.Reach, mode string, ns tenancy.Namespace, items []fleetv1alpha1.MemberCluster) *metav1.Table {
	if mode == fleetv1alpha1.TenancyOff {
		reach = tenancy.Everything()
	}
	n := reach.For(ns)
	table := &metav1.Table{ColumnDefinitions: reachColumns}
	for i := range items {
		mc := &items[i]
		m := tenancy.MemberOf(mc)
		reached, kinds, policies, reason := "No", none, none, none
		switch ok, why := n.Reaches(m); {
		case mode == fleetv1alpha1.TenancyOff:
			reached, kinds = "Yes", "every kind (tenancy Off)"
		case n.Doubt() != nil:
			reached, reason = "Unknown", oneLine(n.Doubt().Error())
		case ok:
			reached = "Yes"
			var names, described []string
			for _, g := range n.Grants(m) {
				names = append(names, g.Policy)
				described = append(described, g.Policy+": "+tenancy.DescribeKinds(g.Kinds))
			}
			policies, kinds = bounded(names), boundedKinds(described)
		default:
			reason = oneLine(why)
		}
		table.Rows = append(table.Rows, tableRow(mc, mc.Name, reached, kinds, policies, orNone(m.Source), reason))
	}
	return table
}

// boundedKinds joins the kinds each policy allows, the first shownInCell
// policies', and counts the others.
func boundedKinds(described []string) string {
	if len(described) <= shownInCell {
		return strings.Join(described, "; ")
	}
	return fmt.Sprintf("%s; and %d more policies", strings.Join(described[:shownInCell], "; "), len(described)-shownInCell)
}

// reachNotice says, for get members --namespace, in which mode the fleet
// is and what the namespace's policies are.
func reachNotice(w io.Writer, reach *tenancy.Reach, mode, why string, namespace tenancy.Namespace) {
	fmt.Fprintf(w, "Tenancy is %s (%s).\n", mode, why)
	ns, n := namespace.Name, reach.For(namespace)
	switch {
	case mode == fleetv1alpha1.TenancyOff:
		fmt.Fprintf(w, "Namespace %s reaches every member with every kind. --tenancy=Enforce shows what the TenancyPolicies would let it reach; \"fleet-manager tenancy dry-run -n %s\" what its Propagations would lose.\n", ns, ns)
	case n.Doubt() != nil:
		fmt.Fprintf(w, "What namespace %s may reach is in doubt: the manager adds and removes nothing of its Propagations until the policies parse.\n", ns)
	case len(n.Policies()) == 0:
		fmt.Fprintf(w, "No TenancyPolicy is for namespace %s: it reaches no member.\n", ns)
	default:
		fmt.Fprintf(w, "Namespace %s: TenancyPolicies %s.\n", ns, strings.Join(n.Policies(), ", "))
	}
}

// tenancyCommand returns "tenancy", whose subcommand is dry-run.
func newTenancyCommand(hub *hubFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenancy",
		Short: "Show what enforcing the TenancyPolicies would change",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("%s wants a command: dry-run", cmd.CommandPath())
		},
	}
	cmd.AddCommand(tenancyDryRunCommand(hub))
	return cmd
}

// tenancyDryRunCommand returns "tenancy dry-run".
func tenancyDryRunCommand(hub *hubFlags) *cobra.Command {
	var (
		tf        tenancyFlags
		namespace string
		output    string
	)
	cmd := &cobra.Command{
		Use:   "dry-run",
		Short: "List the members and kinds each Propagation would lose if the TenancyPolicies were enforced",
		Long: `For each Propagation of the fleet (of one namespace with -n), list the members
it selects now (its spec.members over the fleet's MemberClusters, and those its
status lists) that the TenancyPolicies would not let its namespace reach, and
the kinds it copies that would be refused in the members still reached. Run it
before setting --tenancy=Enforce: once enforced, the members lost are removed
as a deselection is, within each Propagation's deletion policy. A Propagation
whose namespace's policies do not parse is shown in doubt: enforcing would hold
it, adding and removing nothing. It changes nothing on the hub.`,
		Example: `  fleet-manager tenancy dry-run
  fleet-manager tenancy dry-run -n team-a -o wide`,
		Args: noArgs,
	}
	tf.bindFlags(cmd, hub)
	fs := cmd.Flags()
	fs.StringVarP(&namespace, "namespace", "n", "", "Only the Propagations of this namespace. Default: every namespace.")
	fs.StringVarP(&output, "output", "o", "", "Output format: wide adds the reason of the first member lost. Default: a table.")
	_ = cmd.RegisterFlagCompletionFunc("namespace", completeNamespaces(hub))
	completeWith(cmd, "output", func() []string { return []string{"wide"} })
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := tf.check(); err != nil {
			return err
		}
		if output != "" && output != "wide" {
			return usageErrorf("--output must be wide or none, not %q", output)
		}
		c, err := hub.client()
		if err != nil {
			return err
		}
		losses, err := dryRun(cmd.Context(), c, tf.fleetNamespace, namespace)
		if err != nil {
			return err
		}
		return printLosses(cmd, losses, output == "wide")
	}
	return cmd
}

// dryRun reads the policies, Namespaces, MemberClusters and Propagations
// of the fleet of fleetNamespace (of namespace, or all when "") and says
// what enforcing would take from each Propagation.
func dryRun(ctx context.Context, c client.Client, fleetNamespace, namespace string) ([]tenancy.Loss, error) {
	reach, err := readReach(ctx, c)
	if err != nil {
		return nil, err
	}
	var nsList corev1.NamespaceList
	if err := c.List(ctx, &nsList); err != nil {
		return nil, fmt.Errorf("reading the Namespaces: %w", err)
	}
	namespaces := make(map[string]tenancy.Namespace, len(nsList.Items))
	for _, ns := range nsList.Items {
		namespaces[ns.Name] = tenancy.Namespace{Name: ns.Name, Labels: ns.Labels}
	}
	var mcs fleetv1alpha1.MemberClusterList
	if err := c.List(ctx, &mcs); err != nil {
		return nil, hubReadError(err)
	}
	var members []tenancy.Member
	for i := range mcs.Items {
		if !ofOtherFleet(&mcs.Items[i], fleetNamespace) {
			members = append(members, tenancy.MemberOf(&mcs.Items[i]))
		}
	}
	var props fleetv1alpha1.PropagationList
	if err := c.List(ctx, &props, client.InNamespace(namespace)); err != nil {
		return nil, propagationReadError(err)
	}
	var ours []tenancy.Propagation
	for i := range props.Items {
		p := &props.Items[i]
		// This fleet's, or no fleet's yet: its first manager claims it.
		if owner, ok := p.Labels[fleetv1alpha1.FleetLabel]; !ok || owner == fleetNamespace {
			ours = append(ours, tenancy.PropagationOf(p))
		}
	}
	slices.SortFunc(ours, func(a, b tenancy.Propagation) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return tenancy.DryRun(reach, namespaces, ours, members), nil
}

// lossColumns are the columns of tenancy dry-run.
var lossColumns = []metav1.TableColumnDefinition{
	{Name: "Namespace", Type: "string"},
	{Name: "Name", Type: "string", Format: "name"},
	{Name: "Selected", Type: "integer", Description: "Members it selects now"},
	{Name: "Lost", Type: "string", Description: "How many of them it would no longer reach; Unknown when in doubt"},
	{Name: "Members Lost", Type: "string"},
	{Name: "Kinds Refused", Type: "string", Description: "Kinds it copies that members it still reaches would refuse"},
	{Name: "Reason", Type: "string", Priority: 1, Description: "Why the first member is lost, or what is in doubt"},
}

// printLosses writes losses as a table, then a summary on stderr.
func printLosses(cmd *cobra.Command, losses []tenancy.Loss, wide bool) error {
	if len(losses) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "No Propagations found.")
		return nil
	}
	table := &metav1.Table{ColumnDefinitions: lossColumns}
	losing, doubts := 0, 0
	for _, l := range losses {
		lost, members, kinds, reason := fmt.Sprint(len(l.Excluded)), none, none, none
		switch {
		case l.Doubt != "":
			doubts++
			lost, reason = "Unknown", oneLine(l.Doubt)
		case l.Loses():
			losing++
		}
		var names []string
		for _, e := range l.Excluded {
			names = append(names, e.Member)
		}
		if len(names) > 0 {
			members, reason = bounded(names), oneLine(l.Excluded[0].Reason)
		}
		var refused []string
		for _, r := range l.Refused {
			refused = append(refused, fmt.Sprintf("%s in %d", kindOf(r), len(r.Members)))
		}
		if len(refused) > 0 {
			kinds = bounded(refused)
			if len(names) == 0 {
				reason = oneLine(l.Refused[0].Reason)
			}
		}
		table.Rows = append(table.Rows, metav1.TableRow{Cells: []any{l.Namespace, l.Name, int64(len(l.Selected)), lost, members, kinds, reason}})
	}
	if err := printers.NewTablePrinter(printers.PrintOptions{Wide: wide}).PrintObj(table, cmd.OutOrStdout()); err != nil {
		return err
	}
	switch {
	case losing == 0 && doubts == 0:
		fmt.Fprintf(cmd.ErrOrStderr(), "No Propagation of the %d would lose a member or a kind: the TenancyPolicies can be enforced.\n", len(losses))
	default:
		fmt.Fprintf(cmd.ErrOrStderr(), "%d of %d Propagations would lose members or kinds, and %d are in doubt (held, nothing added or removed), if the TenancyPolicies were enforced.\n", losing, len(losses), doubts)
	}
	return nil
}

// kindOf names r's kind as kubectl does: Kind, or Kind.group.
func kindOf(r tenancy.Refusal) string {
	if r.Kind.Group == "" {
		return r.Kind.Kind
	}
	return r.Kind.Kind + "." + r.Kind.Group
}
