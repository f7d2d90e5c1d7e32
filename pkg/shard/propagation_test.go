package shard_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/controlplane"
	"github.com/fleetkube/fleet-manager/internal/fleettest"
	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/fleet"
	"github.com/fleetkube/fleet-manager/pkg/journal"
)

// TestPropagationUnderSharding: three replicas share a fleet of three
// members and one Propagation. Each member's copies are applied by its
// owner; each replica writes its shard of the status and one sums them
// up; a member that moves keeps its copies; a deleted Propagation goes
// once every replica let go of it, an unreachable member owing the
// removal of its copies; and the replica that takes that member over
// carries the removal out.
func TestPropagationUnderSharding(t *testing.T) {
	ns, team := suite.Name("shard-prop"), suite.Name("team")
	fleettest.CreateNamespace(t, suite.HubClient, team)
	start := func(name string) *fleettest.Fleet {
		j, err := journal.Open(t.TempDir(), journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = j.Close() })
		return suite.StartFleet(t, fleettest.FleetOptions{
			Namespace: ns,
			Configure: func(o *fleet.Options) {
				fleettest.QuickHealth(o)
				o.Shard = quickShard(name)
			},
			Setup: func(m *fleet.Manager) error { return propagation.Add(m, propagation.Options{Journal: j}) },
		})
	}
	replicas := map[string]*fleettest.Fleet{}
	for _, name := range []string{"prop-a", "prop-b", "prop-c"} {
		replicas[name] = start(name)
	}
	// The first member is reached through a proxy, which the test takes
	// down to make it unreachable.
	var members []string
	var proxy *controlplane.Proxy
	for i, kubeconfig := range suite.Kubeconfigs {
		name := "prop-member-" + string(rune('0'+i))
		members = append(members, name)
		if i == 0 {
			kubeconfig, proxy = fleettest.ViaProxy(t, kubeconfig)
		}
		replicas["prop-a"].Register(t, name, kubeconfig, map[string]string{"fleet": ns})
	}
	unreachable := members[0]
	owner := func(member string) string {
		for name, f := range replicas {
			if f.Manager.Owns(member) {
				return name
			}
		}
		return ""
	}
	poll.Until(t, "every member owned", func() bool { return !slices.ContainsFunc(members, func(m string) bool { return owner(m) == "" }) })

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "settings"}, Data: map[string]string{"mode": "sharded"}}
	if err := suite.HubClient.Create(t.Context(), cm); err != nil {
		t.Fatal(err)
	}
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "settings"},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}},
			Members:   fleetv1alpha1.MemberSelector{Selector: fleetv1alpha1.SetAsLabelSelector(map[string]string{"fleet": ns})},
		},
	}
	if err := suite.HubClient.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(p)
	ready := func(what string, cond func(p *fleetv1alpha1.Propagation) bool) *fleetv1alpha1.Propagation {
		t.Helper()
		got := &fleetv1alpha1.Propagation{}
		poll.Until(t, what, func() bool {
			return suite.HubClient.Get(t.Context(), key, got) == nil && got.Status.ObservedGeneration == got.Generation && cond(got)
		})
		return got
	}
	summed := func(p *fleetv1alpha1.Propagation) bool {
		return p.Status.Selected == 3 && p.Status.Applied == 3 && meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.PropagationReady)
	}
	got := ready("applied in all 3 members, summed up", summed)
	shards := map[string]int32{}
	for _, s := range got.Status.Shards {
		shards[s.Replica] = s.Selected
	}
	for _, m := range members {
		if shards[owner(m)] == 0 {
			t.Errorf("member %s's owner %s has no shard counting it: %+v", m, owner(m), got.Status.Shards)
		}
	}
	for i, c := range suite.MemberClients {
		copied := &corev1.ConfigMap{}
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: team, Name: "settings"}, copied); err != nil || copied.Data["mode"] != "sharded" {
			t.Errorf("member %d: copy %v, %v", i, copied.Data, err)
		}
	}

	// A replica that owns some member, not the one to be unreachable,
	// leaves: its members move, their copies stay, and the status is
	// summed up again without its shard.
	var leaving string
	for _, m := range members[1:] {
		if o := owner(m); o != owner(unreachable) {
			leaving = o
			break
		}
	}
	if leaving != "" {
		moved := time.Now()
		replicas[leaving].Stop(t)
		delete(replicas, leaving)
		ready("summed up without "+leaving, func(p *fleetv1alpha1.Propagation) bool {
			return summed(p) && !slices.ContainsFunc(p.Status.Shards, func(s fleetv1alpha1.PropagationShard) bool { return s.Replica == leaving })
		})
		// The new owners found the copies in sync: nothing was written
		// again (the audit log does show the first applies).
		copyWrites := func(since time.Time) []string {
			var out []string
			for i, env := range suite.Members {
				for _, w := range suite.Writes(t, env, "", since) {
					if w.Namespace == team && w.Name == "settings" {
						out = append(out, fmt.Sprintf("member %d: %s", i, w))
					}
				}
			}
			return out
		}
		if len(copyWrites(got.CreationTimestamp.Add(-time.Second))) == 0 {
			t.Error("the audit log shows no apply of the copies")
		}
		if again := copyWrites(moved); len(again) > 0 {
			t.Errorf("copies written again during the move:\n%s", strings.Join(again, "\n"))
		}
	}

	// Deleted while a member is unreachable: the reachable members'
	// copies are removed, the unreachable one owes their removal, then
	// the Propagation goes.
	proxy.Down()
	poll.Until(t, unreachable+" not Ready", func() bool {
		state, _ := replicas[owner(unreachable)].Manager.MemberState(unreachable)
		return state != fleetv1alpha1.MemberStateReady
	})
	if err := suite.HubClient.Delete(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the Propagation gone", func() bool {
		return apierrors.IsNotFound(suite.HubClient.Get(t.Context(), key, &fleetv1alpha1.Propagation{}))
	})
	for i, c := range suite.MemberClients[1:] {
		err := c.Get(t.Context(), client.ObjectKey{Namespace: team, Name: "settings"}, &corev1.ConfigMap{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("member %d: the copy is still there after the Propagation went (%v)", i+1, err)
		}
	}

	// The owner of the unreachable member leaves, so another replica
	// takes it over, with what it owes: once the member is back, its
	// copy is removed.
	previous := owner(unreachable)
	if len(replicas) > 1 {
		replicas[previous].Stop(t)
		delete(replicas, previous)
	}
	poll.Until(t, unreachable+" taken over", func() bool { o := owner(unreachable); return o != "" && o != previous || len(replicas) == 1 })
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the owed copy removed from "+unreachable, func() bool {
		return apierrors.IsNotFound(suite.MemberClients[0].Get(t.Context(), client.ObjectKey{Namespace: team, Name: "settings"}, &corev1.ConfigMap{}))
	})
}
