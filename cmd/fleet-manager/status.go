package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// newStatusCommand returns "status NAME", of a member, with the
// subcommands "member NAME", "propagation NAME" and "clusterpropagation
// NAME".
func newStatusCommand(hub *hubFlags) *cobra.Command {
	return statusCommand(hub, clock.RealClock{})
}

// statusCommand is newStatusCommand with the clock that relative times
// are measured by.
func statusCommand(hub *hubFlags, clk clock.PassiveClock) *cobra.Command {
	status := memberStatusCommand(hub, clk, "status NAME")
	status.Short = "Show how the manager sees a member (status NAME) or where a Propagation stands (status propagation NAME)"
	status.Long = `Show how the manager sees one member: its state, maintenance (and where its
drain stands), conditions, transitions, controllers, owed removals,
credentials, and where each Propagation that
selects it stands there (applied, available, or why not). A member no manager is probing is
Unknown: its last probe is older than --stale-after, or no manager holds its
fleet's Lease (leader election); the state it records is shown beside.
"status member NAME" is the same, for a member named like a subcommand;
"status propagation NAME" shows a Propagation, "status clusterpropagation
NAME" a ClusterPropagation.`
	status.Example = `  fleet-manager status eu-1
  fleet-manager status eu-1 -o yaml
  fleet-manager status propagation web -n team-a
  fleet-manager status clusterprop baseline`
	status.AddCommand(memberStatusCommand(hub, clk, "member NAME"), propagationStatusCommand(hub, clk), clusterPropagationStatusCommand(hub, clk))
	return status
}

// memberStatusCommand returns the command use names, which shows a
// member's status.
func memberStatusCommand(hub *hubFlags, clk clock.PassiveClock, use string) *cobra.Command {
	staleAfter := defaultStaleAfter
	cmd := &cobra.Command{
		Use:               use,
		Short:             "Show how the manager sees one member: state, conditions, transitions, controllers, owed removals, credentials, Propagations",
		Args:              exactArgs(1, "a member NAME"),
		ValidArgsFunction: completeMember(hub),
	}
	if use != "status NAME" {
		cmd.Aliases = []string{"members", "mc"}
	}
	out := bindOutputFlags(cmd, false)
	cmd.Flags().DurationVar(&staleAfter, "stale-after", defaultStaleAfter, "How old the member's last probe may be before its state is Unknown: 18 of the manager's --probe-interval.")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		p, err := out.toPrinter(false)
		if err != nil {
			return err
		}
		if staleAfter <= 0 {
			return usageErrorf("--stale-after must be positive")
		}
		c, err := hub.client()
		if err != nil {
			return err
		}
		var mc fleetv1alpha1.MemberCluster
		if err := c.Get(cmd.Context(), client.ObjectKey{Name: args[0]}, &mc); err != nil {
			return hubReadError(err)
		}
		if !p.view {
			return p.printObjects(cmd.OutOrStdout(), []client.Object{&mc}, true)
		}
		now := clk.Now()
		if err := printStatus(cmd.OutOrStdout(), &mc, newFreshness(c, staleAfter).stale(cmd.Context(), &mc, now), now); err != nil {
			return err
		}
		var props fleetv1alpha1.PropagationList
		var clusterProps fleetv1alpha1.ClusterPropagationList
		for _, list := range []client.ObjectList{&props, &clusterProps} {
			if err := c.List(cmd.Context(), list); err != nil {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "\nPropagations: cannot list them: %v\n", propagationReadError(err))
				return err
			}
		}
		for i := range clusterProps.Items {
			props.Items = append(props.Items, asPropagation(&clusterProps.Items[i]))
		}
		return memberPropagationsSection(cmd.OutOrStdout(), &mc, props.Items, now)
	}
	return cmd
}

// printStatus writes mc's summary to w, with times relative to now; stale
// says why its recorded state is not current, if it is not.
func printStatus(w io.Writer, mc *fleetv1alpha1.MemberCluster, stale string, now time.Time) error {
	st := mc.Status
	ref := mc.Spec.SecretRef
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	field := func(name, value string) { fmt.Fprintf(tw, "%s:\t%s\n", name, value) }

	field("Name", mc.Name)
	field("Labels", orNone(labels.FormatLabels(mc.Labels)))
	state := orNone(string(st.State))
	if st.StateSince != nil {
		state += " since " + when(st.StateSince, now)
	}
	if stale != "" {
		field("State", stateUnknown+": "+stale)
		field("Recorded state", state)
	} else {
		field("State", state)
	}
	if st.Replica != "" {
		field("Replica", st.Replica+" (owns the member: connects to it and does its work)")
	}
	field("Maintenance", orNone(string(mc.Spec.Maintenance)))
	if st.Drain != nil {
		field("Drain", drainState(st.Drain))
	}
	field("Format", string(ref.Format))
	field("Secret", ref.Namespace+"/"+ref.Name)
	field("Server version", orNone(oneLine(st.ServerVersion)))
	probe := none
	if st.LastProbeTime != nil {
		probe = fmt.Sprintf("%s, %s, %d consecutive failures", when(st.LastProbeTime, now), orNone(string(st.LastProbeResult)), st.ConsecutiveFailures)
	}
	field("Last probe", probe)
	field("Last error", orNone(oneLine(st.LastError)))
	field("Engaged controllers", orNone(strings.Join(st.EngagedControllers, ", ")))
	if err := tw.Flush(); err != nil {
		return err
	}

	if err := conditionsSection(w, st.Conditions, now); err != nil {
		return err
	}
	transitions := make([][]string, len(st.RecentTransitions))
	for i, t := range st.RecentTransitions {
		transitions[i] = []string{utc(t.Time), age(&t.Time, now), string(t.State), orNone(oneLine(t.Reason))}
	}
	if err := section(w, "Recent transitions (newest last)", []string{"TIME", "AGE", "STATE", "REASON"}, transitions); err != nil {
		return err
	}
	ctrls := make([][]string, len(st.ControllerConditions))
	for i, c := range st.ControllerConditions {
		ctrls[i] = []string{c.Name, string(c.Status), oneLine(c.Reason), age(&c.LastTransitionTime, now), orNone(oneLine(c.Message))}
	}
	if err := section(w, "Controller conditions", []string{"NAME", "STATUS", "REASON", "AGE", "MESSAGE"}, ctrls); err != nil {
		return err
	}

	owed := make([][]string, len(st.OwedRemovals))
	for i, o := range st.OwedRemovals {
		owed[i] = []string{o.Propagation, utc(o.Since), age(&o.Since, now), orNone(oneLine(o.Reason))}
	}
	title := "Owed removals"
	if int(st.OwedRemovalCount) > len(owed) {
		title = fmt.Sprintf("Owed removals (%d, the oldest %d shown)", st.OwedRemovalCount, len(owed))
	}
	if err := section(w, title, []string{"PROPAGATION", "SINCE", "AGE", "REASON"}, owed); err != nil {
		return err
	}

	cred := st.Credentials
	if cred == nil {
		_, err := fmt.Fprintf(w, "\nCredentials: %s\n", none)
		return err
	}
	fmt.Fprintln(w, "\nCredentials:")
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	field("  Type", orNone(string(cred.Type)))
	expires := none
	if cred.ExpirationTime != nil {
		expires = utc(*cred.ExpirationTime) + " (" + expiry(cred.ExpirationTime, now) + ")"
	}
	field("  Expires", expires)
	field("  Renewable", strconv.FormatBool(cred.Renewable))
	field("  Last renewal", when(cred.LastRenewalTime, now))
	field("  Last renewal error", orNone(oneLine(cred.LastRenewalError)))
	return tw.Flush()
}

// memberPropagationsSection writes where each Propagation (a
// ClusterPropagation has no namespace) that selects mc, or still lists
// it, stands there. A selected member a Propagation does
// not list is applied and available: status lists only the others.
func memberPropagationsSection(w io.Writer, mc *fleetv1alpha1.MemberCluster, props []fleetv1alpha1.Propagation, now time.Time) error {
	var rows [][]string
	for i := range props {
		p := &props[i]
		name := p.Namespace + "/" + p.Name
		if p.Namespace == "" {
			name = "clusterpropagation/" + p.Name
		}
		listed := slices.IndexFunc(p.Status.Members, func(m fleetv1alpha1.MemberPropagationStatus) bool { return m.Name == mc.Name })
		switch {
		case listed >= 0:
			m := p.Status.Members[listed]
			rows = append(rows, []string{name, string(m.Result), string(orUnknown(m.Available)), orNone(m.Reason), age(&m.LastTransitionTime, now), orNone(oneLine(m.Message))})
		case !selectsMember(p.Spec.Members, mc):
		case p.Status.ObservedGeneration != p.Generation:
			rows = append(rows, []string{name, string(fleetv1alpha1.ResultPending), string(metav1.ConditionUnknown), none, none, "the Propagation's status is not of its generation yet"})
		default:
			rows = append(rows, []string{name, string(fleetv1alpha1.ResultApplied), string(metav1.ConditionTrue), fleetv1alpha1.ReasonAvailable, availableAge(p, now), none})
		}
	}
	return section(w, "Propagations", []string{"PROPAGATION", "RESULT", "AVAILABLE", "REASON", "AGE", "MESSAGE"}, rows)
}

// availableAge is how long a member p does not list has been applied and
// available, at least: since p turned Ready, when it is, for every
// selected member was then; <none> while another member holds p not
// Ready, as p's status counts such a member without a time.
func availableAge(p *fleetv1alpha1.Propagation, now time.Time) string {
	c := meta.FindStatusCondition(p.Status.Conditions, fleetv1alpha1.PropagationReady)
	if c == nil || c.Status != metav1.ConditionTrue {
		return none
	}
	return age(&c.LastTransitionTime, now)
}

// selectsMember reports whether s selects mc, as the manager decides.
func selectsMember(s fleetv1alpha1.MemberSelector, mc *fleetv1alpha1.MemberCluster) bool {
	if len(s.Names) > 0 && !slices.Contains(s.Names, mc.Name) {
		return false
	}
	sel, err := s.Selector.AsSelector()
	return err == nil && (s.Selector == nil || sel.Matches(labels.Set(mc.Labels)))
}

// section writes a titled table of rows under header, or the title and
// <none> when there are no rows.
func section(w io.Writer, title string, header []string, rows [][]string) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintf(w, "\n%s: %s\n", title, none)
		return err
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	for _, row := range append([][]string{header}, rows...) {
		fmt.Fprintf(tw, "  %s\n", strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// when is t in UTC with how long ago it was at now, or <none>.
func when(t *metav1.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return none
	}
	return utc(*t) + " (" + age(t, now) + " ago)"
}

// expiry says how long t is after now, or that it has passed.
func expiry(t *metav1.Time, now time.Time) string {
	if !t.After(now) {
		return "expired " + age(t, now) + " ago"
	}
	return "in " + until(t, now)
}

func utc(t metav1.Time) string { return t.UTC().Format(time.RFC3339) }

// oneLine makes s fit on one line of a table: control characters (line
// breaks, tabs, terminal escapes) become spaces.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// conditionsSection prints conditions as status's Conditions section.
func conditionsSection(w io.Writer, conditions []metav1.Condition, now time.Time) error {
	rows := make([][]string, len(conditions))
	for i, c := range conditions {
		rows[i] = []string{c.Type, string(c.Status), c.Reason, age(&c.LastTransitionTime, now), orNone(oneLine(c.Message))}
	}
	return section(w, "Conditions", []string{"TYPE", "STATUS", "REASON", "AGE", "MESSAGE"}, rows)
}
