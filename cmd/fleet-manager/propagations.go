package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// shownMembers is how many members not applied a wide row of get
// propagations names; the others are counted.
const shownMembers = 3

// namespaceFlags say which namespace, or all, a command reads.
type namespaceFlags struct {
	namespace     string
	allNamespaces bool
}

func (n *namespaceFlags) bindFlags(cmd *cobra.Command, hub *hubFlags, all bool) {
	fs := cmd.Flags()
	fs.StringVarP(&n.namespace, "namespace", "n", "", "Namespace of the Propagations. Default: the namespace of the hub kubeconfig's context, else default.")
	if all {
		fs.BoolVarP(&n.allNamespaces, "all-namespaces", "A", false, "List the Propagations of every namespace.")
	}
	_ = cmd.RegisterFlagCompletionFunc("namespace", completeNamespaces(hub))
}

// hubNamespace is ns, else the namespace of the hub kubeconfig's context,
// else default, as kubectl picks it.
func hubNamespace(hub *hubFlags, ns string) (string, error) {
	if ns != "" {
		return ns, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = hub.kubeconfig
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: hub.context}).Namespace()
	if err != nil {
		return "", fmt.Errorf("loading the hub kubeconfig: %w", err)
	}
	return ns, nil
}

// getPropagationsCommand returns "get propagations".
func getPropagationsCommand(hub *hubFlags, clk clock.PassiveClock) *cobra.Command {
	var (
		ns       namespaceFlags
		selector string
	)
	cmd := &cobra.Command{
		Use:     "propagations [NAME...]",
		Aliases: []string{"propagation", "prop"},
		Short:   "List the Propagations of a namespace, or of all, as kubectl get does",
		Long: `List the Propagations of a namespace (-n), or of all (-A), as a table of their
member counts, or as -o asks. -o wide adds the members that owe deletions and
those not applied, with their result and reason.`,
		Example: `  fleet-manager get propagations -n team-a
  fleet-manager get prop -A -o wide
  fleet-manager get propagation web -n team-a -o yaml`,
		ValidArgsFunction: completePropagations(hub, &ns.namespace),
	}
	out := bindOutputFlags(cmd, true)
	ns.bindFlags(cmd, hub, true)
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "Label selector to filter Propagations on.")
	cmd.RunE = func(cmd *cobra.Command, names []string) error {
		p, err := out.toPrinter(ns.allNamespaces)
		if err != nil {
			return err
		}
		sel, err := namesOrSelector(names, selector)
		switch {
		case err != nil:
			return err
		case len(names) > 0 && ns.allNamespaces:
			return usageErrorf("NAME and --all-namespaces cannot be used together: name the namespace with -n")
		}
		namespace := ""
		if !ns.allNamespaces {
			if namespace, err = hubNamespace(hub, ns.namespace); err != nil {
				return err
			}
		}
		c, err := hub.client()
		if err != nil {
			return err
		}
		items, getErr := getPropagations(cmd.Context(), c, namespace, names, sel)
		if getErr != nil && len(items) == 0 {
			return getErr
		}
		if err := printPropagations(cmd, p, items, namespace, len(names) == 1, clk.Now()); err != nil {
			return err
		}
		return getErr
	}
	return cmd
}

// getPropagations returns the Propagations names, or every one sel
// matches, of namespace ("" for all), sorted by namespace and name. With
// names, it returns those it found and an error naming the others.
func getPropagations(ctx context.Context, c client.Client, namespace string, names []string, sel labels.Selector) ([]fleetv1alpha1.Propagation, error) {
	if len(names) == 0 {
		var list fleetv1alpha1.PropagationList
		if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, propagationReadError(err)
		}
		slices.SortFunc(list.Items, func(a, b fleetv1alpha1.Propagation) int {
			return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
		})
		return list.Items, nil
	}
	return getNamed(names, errNoPropagationCRD, func(name string) (fleetv1alpha1.Propagation, error) {
		var p fleetv1alpha1.Propagation
		return p, propagationReadError(c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &p))
	})
}

// errNoPropagationCRD: the hub serves no Propagations.
var errNoPropagationCRD = errors.New("the hub has no Propagation CRD: apply deploy/crd (kubectl apply -k deploy/)")

// propagationReadError turns the hub's answer that it serves no
// Propagations into errNoPropagationCRD.
func propagationReadError(err error) error {
	if errors.Is(hubReadError(err), errNoCRD) {
		return errNoPropagationCRD
	}
	return err
}

// printPropagations writes items of namespace ("" for all) as p asks.
func printPropagations(cmd *cobra.Command, p *resourcePrinter, items []fleetv1alpha1.Propagation, namespace string, single bool, now time.Time) error {
	if len(items) == 0 && p.rows != nil {
		if namespace == "" {
			fmt.Fprintln(cmd.ErrOrStderr(), "No Propagations found.")
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "No Propagations found in namespace %s.\n", namespace)
		}
		return nil
	}
	return printPropagationRows(cmd, p, items, asObjects(items), single, now)
}

// printPropagationRows writes items, whose objects are objs (a
// ClusterPropagation's differ), as p asks.
func printPropagationRows(cmd *cobra.Command, p *resourcePrinter, items []fleetv1alpha1.Propagation, objs []client.Object, single bool, now time.Time) error {
	if p.rows == nil || p.custom {
		return p.printObjects(cmd.OutOrStdout(), objs, single)
	}
	table := &metav1.Table{ColumnDefinitions: propagationColumns}
	for i := range items {
		table.Rows = append(table.Rows, propagationRow(&items[i], now))
	}
	return p.rows.PrintObj(table, cmd.OutOrStdout())
}

// propagationColumns are kubectl get prop's columns, then the wide ones.
var propagationColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name"},
	{Name: "Selected", Type: "integer"},
	{Name: "Applied", Type: "integer"},
	{Name: "Available", Type: "integer"},
	{Name: "Failed", Type: "integer"},
	{Name: "Revision", Type: "integer", Description: "The revision being rolled out"},
	{Name: "Pinned", Type: "integer", Description: "The revision spec.revision pins: the newest is not rolled out while it is set"},
	{Name: "Rollout", Type: "string", Description: "Where the rollout stands"},
	{Name: "Ready", Type: "string"},
	{Name: "Age", Type: "string"},
	{Name: "Drifted", Type: "integer", Priority: 1},
	{Name: "Resources", Type: "integer", Priority: 1, Description: "Hub objects selected"},
	{Name: "Deletions Owed", Type: "integer", Priority: 1, Description: "Members that owe the removal of copies"},
	{Name: "Not Available", Type: "string", Priority: 1, Description: "Members not applied and available, with their result and reason"},
}

func propagationRow(prop *fleetv1alpha1.Propagation, now time.Time) metav1.TableRow {
	st := prop.Status
	revision, phase := any(none), none
	if r := st.Rollout; r != nil {
		phase = orNone(string(r.Phase))
		if r.Revision > 0 {
			revision = r.Revision
		}
	}
	pinned := any(none)
	if prop.Spec.Revision != nil {
		pinned = *prop.Spec.Revision
	}
	return tableRow(prop,
		prop.Name, int64(st.Selected), int64(st.Applied), int64(st.Available), int64(st.Failed), revision, pinned, phase,
		conditionStatus(st.Conditions, fleetv1alpha1.PropagationReady), age(&prop.CreationTimestamp, now),
		int64(st.Drifted), int64(st.SelectedResourceCount), int64(st.PendingDeletions), notAvailable(st.Members),
	)
}

// notAvailable names the first members, "east:Failed(Forbidden)", and
// counts the others, as kubectl's endpoints column does.
func notAvailable(members []fleetv1alpha1.MemberPropagationStatus) string {
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.Name + ":" + string(m.Result)
		if m.Reason != "" {
			names[i] += "(" + m.Reason + ")"
		}
	}
	return orNone(someNames(names))
}

// propagationStatusCommand returns "status propagation NAME".
func propagationStatusCommand(hub *hubFlags, clk clock.PassiveClock) *cobra.Command {
	var ns namespaceFlags
	cmd := &cobra.Command{
		Use:               "propagation NAME",
		Aliases:           []string{"propagations", "prop"},
		Short:             "Show where a Propagation stands: its spec, counts, rollout, conditions, and each member not applied and available",
		Args:              exactArgs(1, "a Propagation NAME"),
		ValidArgsFunction: completeOnlyFirst(completePropagations(hub, &ns.namespace)),
	}
	out := bindOutputFlags(cmd, false)
	ns.bindFlags(cmd, hub, false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		p, err := out.toPrinter(false)
		if err != nil {
			return err
		}
		namespace, err := hubNamespace(hub, ns.namespace)
		if err != nil {
			return err
		}
		c, err := hub.client()
		if err != nil {
			return err
		}
		var prop fleetv1alpha1.Propagation
		if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: namespace, Name: args[0]}, &prop); err != nil {
			return propagationReadError(err)
		}
		if !p.view {
			return p.printObjects(cmd.OutOrStdout(), []client.Object{&prop}, true)
		}
		return printPropagationStatus(cmd.OutOrStdout(), &prop, clk.Now())
	}
	return cmd
}

// printPropagationStatus writes prop's summary to w, with times relative
// to now; a ClusterPropagation's has no namespace.
func printPropagationStatus(w io.Writer, prop *fleetv1alpha1.Propagation, now time.Time) error {
	spec, st := prop.Spec, prop.Status
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	field := func(name, value string) { fmt.Fprintf(tw, "%s:\t%s\n", name, value) }

	field("Name", prop.Name)
	if prop.Namespace != "" {
		field("Namespace", prop.Namespace)
	}
	field("Labels", orNone(labels.FormatLabels(prop.Labels)))
	generation := strconv.FormatInt(prop.Generation, 10)
	switch st.ObservedGeneration {
	case prop.Generation:
	case 0:
		generation += " (no status yet)"
	default:
		generation += fmt.Sprintf(" (the status is of generation %d)", st.ObservedGeneration)
	}
	field("Generation", generation)
	for i, r := range spec.Resources {
		if i == 0 {
			field("Resources", resourceSelector(r))
		} else {
			fmt.Fprintf(tw, "\t%s\n", resourceSelector(r))
		}
	}
	field("Members", memberSelector(spec.Members))
	field("Drift", string(spec.Drift))
	field("Deletion", string(spec.Deletion))
	field("Adopt", strconv.FormatBool(spec.Adopt))
	field("Suspend", strconv.FormatBool(spec.Suspend))
	if spec.ProgressDeadlineSeconds != nil {
		field("Progress deadline", (time.Duration(*spec.ProgressDeadlineSeconds) * time.Second).String())
	}
	for i, o := range spec.Overrides {
		if i == 0 {
			field("Overrides", overrideRule(o))
		} else {
			fmt.Fprintf(tw, "\t%s\n", overrideRule(o))
		}
	}
	field("Selected", fmt.Sprintf("%d: %d applied, %d available, %d drifted, %d failed, %d owe deletions", st.Selected, st.Applied, st.Available, st.Drifted, st.Failed, st.PendingDeletions))
	field("Hub objects", selectedResources(st))
	kinds := make([]string, len(st.Kinds))
	for i, k := range st.Kinds {
		kinds[i] = k.APIVersion + " " + k.Kind
	}
	field("Kinds copied", orNone(strings.Join(kinds, ", ")))
	if err := tw.Flush(); err != nil {
		return err
	}

	if err := rolloutSection(w, prop); err != nil {
		return err
	}
	if err := conditionsSection(w, st.Conditions, now); err != nil {
		return err
	}
	members := make([][]string, len(st.Members))
	var drifted [][]string
	for i, m := range st.Members {
		confirmed := "<never>"
		if m.LastConfirmedTime != nil {
			confirmed = age(m.LastConfirmedTime, now)
		}
		members[i] = []string{m.Name, string(m.Result), string(orUnknown(m.Available)), revisionNumber(m.Revision), orNone(m.Reason), age(&m.LastTransitionTime, now), confirmed, orNone(oneLine(m.Message))}
		for _, f := range m.DriftedFields {
			drifted = append(drifted, []string{m.Name, oneLine(f)})
		}
	}
	if err := section(w, "Members not applied and available", []string{"NAME", "RESULT", "AVAILABLE", "REVISION", "REASON", "AGE", "CONFIRMED", "MESSAGE"}, members); err != nil {
		return err
	}
	if len(drifted) == 0 {
		return nil
	}
	return section(w, "Drifted fields", []string{"MEMBER", "FIELD"}, drifted)
}

// rolloutSection writes prop's Rollout section: its strategy, pause, pin,
// the revision rolled out and where that stands, then which members are
// given which revision.
func rolloutSection(w io.Writer, prop *fleetv1alpha1.Propagation) error {
	spec, st := prop.Spec, prop.Status
	fmt.Fprintln(w, "\nRollout:")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	field := func(name, value string) { fmt.Fprintf(tw, "  %s:\t%s\n", name, value) }
	field("Strategy", rolloutStrategy(spec.Strategy))
	field("Paused", strconv.FormatBool(spec.Paused))
	pin := none
	if spec.Revision != nil {
		pin = strconv.FormatInt(*spec.Revision, 10)
	}
	field("Pinned revision", pin)
	if b := spec.DisruptionBudget.MaxUnavailable; b != nil {
		field("Disruption budget", fmt.Sprintf("%s unavailable at most", plural(int(*b), "member")))
	}
	if l := spec.RevisionHistoryLimit; l != nil {
		field("History limit", strconv.Itoa(int(*l)))
	}
	field("Newest revision", revisionNumber(st.Revision))
	r := st.Rollout
	if r == nil {
		field("Revision", none)
		field("Phase", none)
		return tw.Flush()
	}
	field("Revision", revisionNumber(r.Revision))
	phase := orNone(string(r.Phase))
	if r.Reason != "" && r.Reason != string(r.Phase) {
		phase += " (" + r.Reason + ")"
	}
	field("Phase", phase)
	field("Message", orNone(oneLine(r.Message)))
	field("Updated", fmt.Sprintf("%d of %s, %d failed", r.Updated, plural(int(st.Selected), "member"), r.Failed))
	field("Draining", orNone(someNames(r.Draining)))
	if err := tw.Flush(); err != nil {
		return err
	}
	given := make([][]string, len(r.Members))
	for i, m := range r.Members {
		given[i] = []string{revisionNumber(m.Revision), strconv.Itoa(len(m.Names)), orNone(someNames(m.Names))}
	}
	return section(w, "Members by revision", []string{"REVISION", "MEMBERS", "NAMES"}, given)
}

// rolloutStrategy says how a new revision reaches the members:
// "Progressive: groupBy region (canary, eu), maxConcurrency 25%,
// minSuccessTime 5m0s, maxFailures 1", defaults included.
func rolloutStrategy(s fleetv1alpha1.RolloutStrategy) string {
	if s.Type != fleetv1alpha1.RolloutProgressive {
		return string(fleetv1alpha1.RolloutAll)
	}
	p := ptr.Deref(s.Progressive, fleetv1alpha1.ProgressiveRollout{})
	var parts []string
	if p.GroupBy != "" {
		group := "groupBy " + p.GroupBy
		if len(p.Groups) > 0 {
			group += " (" + strings.Join(p.Groups, ", ") + ")"
		}
		parts = append(parts, group)
	}
	concurrency := ptr.Deref(p.MaxConcurrency, intstr.FromInt32(1))
	parts = append(parts,
		"maxConcurrency "+concurrency.String(),
		"minSuccessTime "+ptr.Deref(p.MinSuccessTime, metav1.Duration{}).Duration.String(),
		fmt.Sprintf("maxFailures %d", ptr.Deref(p.MaxFailures, 1)),
	)
	return "Progressive: " + strings.Join(parts, ", ")
}

// revisionNumber is a revision's number, or <none> for 0, no revision.
func revisionNumber(n int64) string {
	if n == 0 {
		return none
	}
	return strconv.FormatInt(n, 10)
}

// someNames joins the first shownMembers of names and counts the others,
// as kubectl's endpoints column does: "a,b,c + 2 more...".
func someNames(names []string) string {
	s := strings.Join(names[:min(len(names), shownMembers)], ",")
	if more := len(names) - shownMembers; more > 0 {
		s += fmt.Sprintf(" + %d more...", more)
	}
	return s
}

// selectedResources says how many hub objects the resources select, and
// names the first: "2: Deployment web, ConfigMap settings".
func selectedResources(st fleetv1alpha1.PropagationStatus) string {
	names := make([]string, len(st.SelectedResources))
	for i, r := range st.SelectedResources {
		names[i] = r.Kind + " " + r.Name
		if r.Envelope != "" {
			names[i] += " (in Envelope " + r.Envelope + ")"
		}
	}
	s := strconv.Itoa(int(st.SelectedResourceCount))
	if len(names) > 0 {
		s += ": " + strings.Join(names[:min(len(names), shownMembers)], ", ")
		if more := int(st.SelectedResourceCount) - min(len(names), shownMembers); more > 0 {
			s += fmt.Sprintf(" + %d more", more)
		}
	}
	return s
}

// overrideRule says what an override rule patches, and where:
// "eu-replicas: apps/v1 Deployment web in region=eu (json patch, 1 operation)".
func overrideRule(o fleetv1alpha1.Override) string {
	s := o.Name + ": " + o.Target.APIVersion + " " + o.Target.Kind
	if o.Target.Name != "" {
		s += " " + o.Target.Name
	}
	s += " in " + memberSelector(o.Members)
	if o.MergePatch != nil {
		return s + " (merge patch)"
	}
	if len(o.JSONPatch) == 1 {
		return s + " (json patch, 1 operation)"
	}
	return s + fmt.Sprintf(" (json patch, %d operations)", len(o.JSONPatch))
}

// orUnknown is s, or Unknown when it is not set.
func orUnknown(s metav1.ConditionStatus) metav1.ConditionStatus {
	if s == "" {
		return metav1.ConditionUnknown
	}
	return s
}

// resourceSelector says what r selects: "apps/v1 Deployment web" or
// "v1 ConfigMap app=web", with its wave and availableWhen if set.
func resourceSelector(r fleetv1alpha1.ResourceSelector) string {
	s := r.APIVersion + " " + r.Kind + " "
	if r.Selector != nil {
		s += selectorString(r.Selector)
	} else {
		s += r.Name
	}
	if r.Wave != 0 {
		s += fmt.Sprintf(" (wave %d)", r.Wave)
	}
	if r.AvailableWhen != "" {
		s += ", available when " + oneLine(r.AvailableWhen)
	}
	return s
}

// memberSelector says which members s selects.
func memberSelector(s fleetv1alpha1.MemberSelector) string {
	var parts []string
	if s.Selector != nil {
		parts = append(parts, "labels "+selectorString(s.Selector))
	}
	if len(s.Names) > 0 {
		parts = append(parts, "names "+strings.Join(s.Names, ", "))
	}
	if len(parts) == 0 {
		return "every member"
	}
	return strings.Join(parts, "; ")
}

// selectorString is s as kubectl -l writes it, or its error.
func selectorString(s *fleetv1alpha1.LabelSelector) string {
	sel, err := s.AsSelector()
	if err != nil {
		return "invalid: " + err.Error()
	}
	if sel.Empty() {
		return "(everything)"
	}
	return sel.String()
}
