package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/enroll"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/tenancy"
)

// errNoCRD is what every command that reads MemberClusters says when the
// hub does not serve them: enroll.ErrNoCRD, and what to do.
var errNoCRD = fmt.Errorf("%w: apply deploy/crd (kubectl apply -k deploy/)", enroll.ErrNoCRD)

// none stands for a field that is not set, as kubectl prints it.
const none = "<none>"

// newGetCommand returns "get", whose resources are members and
// propagations.
func newGetCommand(hub *hubFlags) *cobra.Command {
	return getCommand(hub, clock.RealClock{})
}

// getCommand is newGetCommand with the clock that ages are measured by.
func getCommand(hub *hubFlags, clk clock.WithTicker) *cobra.Command {
	get := &cobra.Command{
		Use:   "get",
		Short: "Display the fleet's members, Propagations and ClusterPropagations",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("%s wants a resource: members or propagations", cmd.CommandPath())
		},
	}
	get.AddCommand(getMembersCommand(hub, clk), getPropagationsCommand(hub, clk), getClusterPropagationsCommand(hub, clk))
	return get
}

// getMembersCommand returns "get members".
func getMembersCommand(hub *hubFlags, clk clock.WithTicker) *cobra.Command {
	var (
		selector   string
		watch      bool
		staleAfter time.Duration
		namespace  string
		tf         tenancyFlags
	)
	members := &cobra.Command{
		Use:     "members [NAME...]",
		Aliases: []string{"member", "mc"},
		Short:   "List the members registered on the hub, as kubectl get does",
		Long: `List the members registered on the hub, as a table (-o wide adds columns), or
as -o asks. A member no manager is probing shows the state Unknown: its last
probe is older than --stale-after, or no manager holds its fleet's Lease
(leader election); LAST PROBE says since when.

With --namespace, list instead what the Propagations of that hub namespace may
reach: each member of the fleet, whether the TenancyPolicies let the namespace
reach it, the kinds they allow there and which policies; first, on stderr, the
fleet's tenancy mode (with it Off, every namespace reaches every member).`,
		Example: `  fleet-manager get members
  fleet-manager get members -o wide -l env=prod
  fleet-manager get member east -o yaml
  fleet-manager get members -o custom-columns=NAME:.metadata.name,VERSION:.status.serverVersion
  fleet-manager get members -o jsonpath='{.items[*].metadata.name}'
  fleet-manager get members --watch
  fleet-manager get members --namespace team-a -o wide`,
		ValidArgsFunction: completeMembers(hub),
	}
	out := bindOutputFlags(members, true)
	members.RunE = func(cmd *cobra.Command, names []string) error {
		p, err := out.toPrinter(false)
		if err != nil {
			return err
		}
		sel, err := namesOrSelector(names, selector)
		if err != nil {
			return err
		}
		if namespace != "" {
			return getReach(cmd, hub, out, namespace, &tf, names, sel, watch)
		}
		if cmd.Flags().Changed("tenancy") || cmd.Flags().Changed("fleet-namespace") {
			return usageErrorf("--tenancy and --fleet-namespace go with --namespace")
		}
		switch {
		case watch && len(names) > 1:
			return usageErrorf("--watch takes one NAME at most")
		case staleAfter <= 0:
			return usageErrorf("--stale-after must be positive")
		}
		cfg, err := hub.restConfig()
		if err != nil {
			return err
		}
		c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return err
		}
		fresh := newFreshness(c, staleAfter)
		if watch {
			return watchMembers(cmd, c, names, sel, p, fresh, clk)
		}
		items, getErr := getMembers(cmd.Context(), c, names, sel)
		if getErr != nil && len(items) == 0 {
			return getErr
		}
		if err := printMembers(cmd, p, items, len(names) == 1, fresh, clk.Now()); err != nil {
			return err
		}
		return getErr
	}
	fs := members.Flags()
	fs.StringVarP(&selector, "selector", "l", "", "Label selector to filter members on, e.g. env=prod,tier!=edge.")
	fs.BoolVarP(&watch, "watch", "w", false, "After listing the members, print each change (and each member whose state turns Unknown or back) until interrupted.")
	fs.DurationVar(&staleAfter, "stale-after", defaultStaleAfter, "How old a member's last probe may be before its state is shown Unknown: 18 of the manager's --probe-interval.")
	fs.StringVarP(&namespace, "namespace", "n", "", "Show what the Propagations of this hub namespace may reach, as the TenancyPolicies say.")
	_ = members.RegisterFlagCompletionFunc("namespace", completeNamespaces(hub))
	tf.bindFlags(members, hub)
	return members
}

// getReach prints, for get members --namespace ns, what ns may reach of
// the members names or sel select.
func getReach(cmd *cobra.Command, hub *hubFlags, out *outputFlags, ns string, tf *tenancyFlags, names []string, sel labels.Selector, watch bool) error {
	switch format := *out.print.OutputFormat; {
	case watch:
		return usageErrorf("--watch does not go with --namespace")
	case format != "" && format != "wide":
		return usageErrorf("with --namespace, --output must be wide or none, not %q", format)
	}
	if err := tf.check(); err != nil {
		return err
	}
	if err := checkNamespaces("namespace", ns); err != nil {
		return err
	}
	p, err := out.toPrinter(false)
	if err != nil {
		return err
	}
	c, err := hub.client()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	mode, why, err := tf.fleetMode(ctx, c)
	if err != nil {
		return err
	}
	reach, err := readReach(ctx, c)
	if err != nil {
		return err
	}
	var namespace corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: ns}, &namespace); err != nil {
		return fmt.Errorf("reading Namespace %s: %w", ns, err)
	}
	items, getErr := getMembers(ctx, c, names, sel)
	if getErr != nil && len(items) == 0 {
		return getErr
	}
	items = slices.DeleteFunc(items, func(mc fleetv1alpha1.MemberCluster) bool { return ofOtherFleet(&mc, tf.fleetNamespace) })
	reachNotice(cmd.ErrOrStderr(), reach, mode, why, tenancy.Namespace{Name: ns, Labels: namespace.Labels})
	if len(items) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "No members registered.")
		return getErr
	}
	if err := p.rows.PrintObj(reachTable(reach, mode, tenancy.Namespace{Name: ns, Labels: namespace.Labels}, items), cmd.OutOrStdout()); err != nil {
		return err
	}
	return getErr
}

// getMembers returns the members names, or every member sel matches, by
// name. With names, it returns those it found and an error naming the
// others.
func getMembers(ctx context.Context, c client.Client, names []string, sel labels.Selector) ([]fleetv1alpha1.MemberCluster, error) {
	if len(names) == 0 {
		var list fleetv1alpha1.MemberClusterList
		if err := c.List(ctx, &list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return nil, hubReadError(err)
		}
		slices.SortFunc(list.Items, func(a, b fleetv1alpha1.MemberCluster) int { return strings.Compare(a.Name, b.Name) })
		return list.Items, nil
	}
	return getNamed(names, errNoCRD, func(name string) (fleetv1alpha1.MemberCluster, error) {
		var mc fleetv1alpha1.MemberCluster
		return mc, hubReadError(c.Get(ctx, client.ObjectKey{Name: name}, &mc))
	})
}

// namesOrSelector parses selector, the -l of a get that also takes NAMEs:
// the two do not go together.
func namesOrSelector(names []string, selector string) (labels.Selector, error) {
	sel, err := labels.Parse(selector)
	switch {
	case err != nil:
		return nil, usageErrorf("--selector: %v", err)
	case len(names) > 0 && selector != "":
		return nil, usageErrorf("NAME and --selector cannot be used together")
	}
	return sel, nil
}

// getNamed gets each of names with get, whose errors are the hub's read
// errors (hubReadError), and returns those found and an error naming the
// others; noKind, the hub serving no such kind, ends it at once.
func getNamed[T any](names []string, noKind error, get func(name string) (T, error)) ([]T, error) {
	var items []T
	var errs []error
	for _, name := range names {
		item, err := get(name)
		switch {
		case errors.Is(err, noKind):
			return nil, err
		case err != nil:
			errs = append(errs, err)
		default:
			items = append(items, item)
		}
	}
	return items, joinLine(errs)
}

// hubReadError turns the hub's answer that it serves no MemberClusters
// into errNoCRD.
func hubReadError(err error) error {
	if meta.IsNoMatchError(err) {
		return errNoCRD
	}
	return err
}

// joinLine joins errs into one line.
func joinLine(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

// printMembers writes items to cmd's output as p asks, their states as
// fresh judges them at now. A single member asked for by name is printed
// as itself by the object printers, as a list otherwise, like kubectl
// does.
func printMembers(cmd *cobra.Command, p *resourcePrinter, items []fleetv1alpha1.MemberCluster, single bool, fresh *freshness, now time.Time) error {
	if len(items) == 0 && p.rows != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "No members registered.")
		return nil
	}
	if p.rows == nil || p.custom {
		return p.printObjects(cmd.OutOrStdout(), asObjects(items), single)
	}
	table := &metav1.Table{ColumnDefinitions: memberColumns}
	for i := range items {
		table.Rows = append(table.Rows, memberRow(cmd.Context(), &items[i], fresh, now))
	}
	return p.rows.PrintObj(table, cmd.OutOrStdout())
}

// memberColumns are the columns of get members; the wide ones have
// priority 1.
var memberColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name"},
	{Name: "State", Type: "string", Description: "Where the member is in its life; Unknown when no manager is probing it"},
	{Name: "Ready", Type: "string"},
	{Name: "Healthy", Type: "string"},
	{Name: "Version", Type: "string"},
	{Name: "Failures", Type: "integer", Description: "Failed probes in a row"},
	{Name: "Last Probe", Type: "string"},
	{Name: "Maintenance", Type: "string", Description: "Cordon or Drain, when the member is taken out of rollouts"},
	{Name: "Age", Type: "string"},
	{Name: "Replica", Type: "string", Priority: 1, Description: "The replica that owns the member, when replicas share the fleet"},
	{Name: "Format", Type: "string", Priority: 1},
	{Name: "Secret", Type: "string", Priority: 1},
	{Name: "Credentials", Type: "string", Priority: 1},
	{Name: "Expires", Type: "string", Priority: 1},
	{Name: "Controllers", Type: "string", Priority: 1, Description: "Fleet controllers engaged with the member, of those that work with members"},
}

// memberRow is mc's row of memberColumns at now: a member fresh judges
// stale is Unknown, Ready and Healthy included.
func memberRow(ctx context.Context, mc *fleetv1alpha1.MemberCluster, fresh *freshness, now time.Time) metav1.TableRow {
	st := mc.Status
	state := orNone(string(st.State))
	ready := conditionStatus(st.Conditions, fleetv1alpha1.ConditionReady)
	healthy := conditionStatus(st.Conditions, fleetv1alpha1.ConditionHealthy)
	if reason := refusal(st); reason != "" {
		state = fmt.Sprintf("Refused (%s)", reason)
	}
	if fresh.stale(ctx, mc, now) != "" {
		state, ready, healthy = stateUnknown, stateUnknown, stateUnknown
	}
	ref := mc.Spec.SecretRef
	credType, expires := none, none
	if c := st.Credentials; c != nil {
		credType = orNone(string(c.Type))
		expires = until(c.ExpirationTime, now)
	}
	return tableRow(mc,
		mc.Name, state, ready, healthy, orNone(oneLine(st.ServerVersion)), int64(st.ConsecutiveFailures),
		age(st.LastProbeTime, now), orNone(string(mc.Spec.Maintenance)), age(&mc.CreationTimestamp, now),
		orNone(st.Replica), string(ref.Format), ref.Namespace+"/"+ref.Name, credType, expires, engaged(st),
	)
}

// refusal is the reason the manager refused a Pending member's
// registration, as its conditions say: its kubeconfig (CredentialsAccepted
// False, for another reason than the member's 401 or 403), or its name or
// cluster (Ready False, DuplicateCluster); "" when it was not refused.
func refusal(st fleetv1alpha1.MemberClusterStatus) string {
	if st.State != fleetv1alpha1.MemberStatePending {
		return ""
	}
	if c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionFalse && c.Reason == registry.ReasonDuplicateCluster {
		return c.Reason
	}
	c := meta.FindStatusCondition(st.Conditions, fleetv1alpha1.ConditionCredentialsAccepted)
	if c != nil && c.Status == metav1.ConditionFalse && c.Reason != fleetv1alpha1.ReasonUnauthorized && c.Reason != fleetv1alpha1.ReasonForbidden {
		return c.Reason
	}
	return ""
}

// engaged says how many fleet controllers are engaged with a member, of
// those that work with it: "2/3 engaged".
func engaged(st fleetv1alpha1.MemberClusterStatus) string {
	n := len(st.EngagedControllers)
	return fmt.Sprintf("%d/%d engaged", n, max(n, len(st.ControllerConditions)))
}

// conditionStatus is the status of the condition typ, or <none>.
func conditionStatus(conds []metav1.Condition, typ string) string {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return string(c.Status)
	}
	return none
}

// age is how long ago t was at now, like kubectl's ages, or <none>.
func age(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return none
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// until is how long after now t is, or "expired" once it has passed, or
// <none>.
func until(t *metav1.Time, now time.Time) string {
	switch {
	case t == nil || t.IsZero():
		return none
	case !t.After(now):
		return "expired"
	}
	return duration.HumanDuration(t.Sub(now))
}

// orNone is s, or <none> if it is empty.
func orNone(s string) string {
	if s == "" {
		return none
	}
	return s
}

// asObjects lists items as the objects the object printers take.
func asObjects[T any, PT interface {
	*T
	client.Object
}](items []T) []client.Object {
	objs := make([]client.Object, len(items))
	for i := range items {
		objs[i] = PT(&items[i])
	}
	return objs
}
