package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/liggitt/tabwriter"
	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// rejudgeEvery is how often get members --watch judges again whether the
// members it printed are probed: a member whose manager stops sends no
// event.
const rejudgeEvery = 5 * time.Second

// watchMembers prints the members names (one at most) or sel selects, then
// each change until cmd's context ends: a row, or an object, per change,
// and a row whenever a member's state turns Unknown or back.
func watchMembers(cmd *cobra.Command, c client.WithWatch, names []string, sel labels.Selector, p *resourcePrinter, fresh *freshness, clk clock.WithTicker) error {
	ctx := cmd.Context()
	opts := &client.ListOptions{LabelSelector: sel}
	if len(names) == 1 {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", names[0])
	}
	var list fleetv1alpha1.MemberClusterList
	if err := c.List(ctx, &list, opts); err != nil {
		return hubReadError(err)
	}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, raw metav1.ListOptions) (watch.Interface, error) {
			o := *opts
			o.Raw = &raw
			return c.Watch(ctx, &fleetv1alpha1.MemberClusterList{}, &o)
		},
	})
	if err != nil {
		return err
	}
	defer w.Stop()

	mw := &memberWatch{cmd: cmd, p: p, fresh: fresh, tw: printers.GetNewTabWriter(cmd.OutOrStdout()), shown: map[string]shownMember{}}
	now := clk.Now()
	for i := range list.Items {
		if err := mw.print(&list.Items[i], now); err != nil {
			return err
		}
	}
	ticker := clk.NewTicker(rejudgeEvery)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, open := <-w.ResultChan():
			if !open {
				return nil
			}
			switch ev.Type {
			case watch.Error:
				return hubReadError(apierrors.FromObject(ev.Object))
			case watch.Added, watch.Modified, watch.Deleted:
				mc, ok := ev.Object.(*fleetv1alpha1.MemberCluster)
				if !ok {
					return fmt.Errorf("watching members: got a %T", ev.Object)
				}
				if err := mw.print(mc, clk.Now()); err != nil {
					return err
				}
				if ev.Type == watch.Deleted {
					delete(mw.shown, mc.Name)
				}
			}
		case <-ticker.C():
			if err := mw.rejudge(clk.Now()); err != nil {
				return err
			}
		}
	}
}

// memberWatch prints the members of a watch.
type memberWatch struct {
	cmd   *cobra.Command
	p     *resourcePrinter
	fresh *freshness
	// tw aligns the rows of every change with the first ones.
	tw *tabwriter.Writer
	// shown are the members printed, by name.
	shown map[string]shownMember
}

// shownMember is a member as last printed, and whether it was stale.
type shownMember struct {
	mc    *fleetv1alpha1.MemberCluster
	stale bool
}

// print prints mc as judged at now.
func (mw *memberWatch) print(mc *fleetv1alpha1.MemberCluster, now time.Time) error {
	ctx := mw.cmd.Context()
	mw.shown[mc.Name] = shownMember{mc: mc, stale: mw.fresh.stale(ctx, mc, now) != ""}
	if mw.p.custom {
		if err := mw.p.printObjects(mw.tw, []client.Object{mc}, true); err != nil {
			return err
		}
		return mw.tw.Flush()
	}
	if mw.p.rows == nil {
		return mw.p.printObjects(mw.cmd.OutOrStdout(), []client.Object{mc}, true)
	}
	table := &metav1.Table{ColumnDefinitions: memberColumns, Rows: []metav1.TableRow{memberRow(ctx, mc, mw.fresh, now)}}
	if err := mw.p.rows.PrintObj(table, mw.tw); err != nil {
		return err
	}
	return mw.tw.Flush()
}

// rejudge prints again, in the table, each member whose staleness changed
// since it was printed; the object printers print objects, which did
// not change.
func (mw *memberWatch) rejudge(now time.Time) error {
	if mw.p.rows == nil || mw.p.custom {
		return nil
	}
	mw.fresh.refresh()
	for _, name := range slices.Sorted(maps.Keys(mw.shown)) {
		s := mw.shown[name]
		if (mw.fresh.stale(mw.cmd.Context(), s.mc, now) != "") != s.stale {
			if err := mw.print(s.mc, now); err != nil {
				return err
			}
		}
	}
	return nil
}
