package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/enroll"
)

// errNoCRD is what every command that reads MemberClusters says when the
// hub does not serve them: enroll.ErrNoCRD, and what to do.
var errNoCRD = fmt.Errorf("%w: apply deploy/crd (kubectl apply -k deploy/)", enroll.ErrNoCRD)

// none stands for a field that is not set, as kubectl prints it.
const none = "<none>"

// newGetCommand returns "get", whose one resource is members.
func newGetCommand(hub *hubFlags) *cobra.Command {
	return getCommand(hub, clock.RealClock{})
}

// getCommand is newGetCommand with the clock that ages are measured by.
func getCommand(hub *hubFlags, clk clock.PassiveClock) *cobra.Command {
	get := &cobra.Command{
		Use:   "get",
		Short: "Display the fleet's members",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("%s wants a resource: members", cmd.CommandPath())
		},
	}
	var output, selector string
	members := &cobra.Command{
		Use:     "members [NAME...]",
		Aliases: []string{"member", "mc"},
		Short:   "List the members registered on the hub, as a table, YAML or JSON",
		Example: `  fleet-manager get members
  fleet-manager get members -o wide -l env=prod
  fleet-manager get member east -o yaml`,
		RunE: func(cmd *cobra.Command, names []string) error {
			if !slices.Contains([]string{"", "wide", "yaml", "json"}, output) {
				return usageErrorf("--output must be wide, yaml or json, not %q", output)
			}
			sel, err := labels.Parse(selector)
			if err != nil {
				return usageErrorf("--selector: %v", err)
			}
			if len(names) > 0 && selector != "" {
				return usageErrorf("NAME and --selector cannot be used together")
			}
			c, err := hub.client()
			if err != nil {
				return err
			}
			items, getErr := getMembers(cmd.Context(), c, names, sel)
			if getErr != nil && len(items) == 0 {
				return getErr
			}
			if err := printMembers(cmd, items, output, len(names) == 1, clk.Now()); err != nil {
				return err
			}
			return getErr
		},
	}
	members.Flags().StringVarP(&output, "output", "o", "", "Output format: wide, yaml or json. Default: a table.")
	members.Flags().StringVarP(&selector, "selector", "l", "", "Label selector to filter members on, e.g. env=prod,tier!=edge.")
	get.AddCommand(members)
	return get
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
	var items []fleetv1alpha1.MemberCluster
	var errs []error
	for _, name := range names {
		var mc fleetv1alpha1.MemberCluster
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &mc); err != nil {
			if err = hubReadError(err); errors.Is(err, errNoCRD) {
				return nil, err
			}
			errs = append(errs, err)
			continue
		}
		items = append(items, mc)
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

// printMembers writes items to cmd's output in format output. A single
// member asked for by name is printed as itself in YAML and JSON, as a
// list otherwise, like kubectl does.
func printMembers(cmd *cobra.Command, items []fleetv1alpha1.MemberCluster, output string, single bool, now time.Time) error {
	w := cmd.OutOrStdout()
	switch output {
	case "yaml", "json":
		return printObjects(w, items, output, single)
	}
	if len(items) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "No members registered.")
		return nil
	}
	return printTable(w, items, output == "wide", now)
}

// printTable writes items as kubectl's table, with the wide columns if
// wide. Ages and relative times are measured at now.
func printTable(w io.Writer, items []fleetv1alpha1.MemberCluster, wide bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	header := []string{"NAME", "STATE", "READY", "HEALTHY", "VERSION", "FAILURES", "LAST PROBE", "AGE"}
	if wide {
		header = append(header, "FORMAT", "SECRET", "CREDENTIALS", "EXPIRES", "ENGAGED")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, mc := range items {
		st := mc.Status
		row := []string{
			mc.Name,
			orNone(string(st.State)),
			conditionStatus(st.Conditions, fleetv1alpha1.ConditionReady),
			conditionStatus(st.Conditions, fleetv1alpha1.ConditionHealthy),
			orNone(oneLine(st.ServerVersion)),
			strconv.Itoa(int(st.ConsecutiveFailures)),
			age(st.LastProbeTime, now),
			age(&mc.CreationTimestamp, now),
		}
		if wide {
			ref := mc.Spec.SecretRef
			credType, expires := none, none
			if c := st.Credentials; c != nil {
				credType = orNone(string(c.Type))
				expires = until(c.ExpirationTime, now)
			}
			row = append(row, string(ref.Format), ref.Namespace+"/"+ref.Name, credType, expires, strconv.Itoa(len(st.EngagedControllers)))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// printObjects writes items as YAML or JSON: a v1 List, or the one item
// alone if single.
func printObjects(w io.Writer, items []fleetv1alpha1.MemberCluster, output string, single bool) error {
	objs := make([]any, len(items))
	for i := range items {
		mc := items[i].DeepCopy()
		mc.APIVersion, mc.Kind = fleetv1alpha1.GroupVersion.String(), "MemberCluster"
		mc.ManagedFields = nil
		objs[i] = mc
	}
	var v any = map[string]any{
		"apiVersion": "v1",
		"kind":       "List",
		"metadata":   map[string]any{"resourceVersion": ""},
		"items":      objs,
	}
	if single && len(objs) == 1 {
		v = objs[0]
	}
	var data []byte
	var err error
	if output == "yaml" {
		data, err = yaml.Marshal(v)
	} else {
		data, err = json.MarshalIndent(v, "", "    ")
		data = append(data, '\n')
	}
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
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
