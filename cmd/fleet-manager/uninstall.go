package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/internal/enroll"
	"github.com/fleetkube/fleet-manager/pkg/controllers/propagation"
	"github.com/fleetkube/fleet-manager/pkg/registry"
	"github.com/fleetkube/fleet-manager/pkg/shard"
)

// uninstallPoll is how often uninstall reads the hub while it waits.
const uninstallPoll = 250 * time.Millisecond

// leaseSkew is how much later than its renew time plus duration a Lease
// still counts as live: the hub's clock and this one may differ.
const leaseSkew = 5 * time.Second

// newUninstallCommand returns "uninstall".
func newUninstallCommand(hub *hubFlags) *cobra.Command {
	return uninstallCommand(hub, clock.RealClock{})
}

// uninstallCommand is newUninstallCommand with the clock that Leases are
// judged by.
func uninstallCommand(hub *hubFlags, clk clock.PassiveClock) *cobra.Command {
	u := &uninstaller{clock: clk}
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove a fleet from its hub and members, leaving nothing stuck",
		Long: `Remove the fleet of --namespace from its hub, while its manager still runs
(it refuses to start when no manager holds a live Lease in --namespace):

 1. delete every Propagation and ClusterPropagation of the fleet, and wait
    until the manager has removed their copies from the members and let them
    go (with --keep-copies, each is first set to deletion: Orphan, so the
    copies stay in the members as plain objects, no longer labelled copies);
 2. wait for the removals that Ready members owe; a member that is not Ready
    and owes removals is kept registered, and uninstall stops and names it,
    unless --leave-owed;
 3. unregister every member: delete its registration Secret, wait for its
    MemberCluster to go, and, where your kubeconfig has a context of the
    member's name, delete what "fleet-manager register" made in it;
 4. delete the fleet's identity, ConfigMap fleet-identity, unless a member
    may still hold objects labelled with it, which it proves the fleet's;
 5. print how to remove the install itself (kubectl delete -k, or
    helm uninstall and then the CRDs).

It never deletes another fleet's objects, nor an object in a member that does
not carry this fleet's identity. It is safe to run again.

When the manager is gone already, and Propagations stay Terminating, held by
its finalizer: --force lets them go, and the fleet's MemberClusters, without
touching any member. Their copies stay in the members; it says which
Propagations had copies where, and the labels that select them.`,
		Example: `  fleet-manager uninstall --dry-run
  fleet-manager uninstall
  fleet-manager uninstall --keep-copies
  fleet-manager uninstall --force   # the manager is gone`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if u.force && (u.keepCopies || u.leaveOwed) {
				return usageErrorf("--keep-copies and --leave-owed need a running manager; --force removes no copy")
			}
			if u.timeout <= 0 {
				return usageErrorf("--timeout must be positive")
			}
			c, err := hub.client()
			if err != nil {
				return err
			}
			u.hub, u.out, u.errOut = c, cmd.OutOrStdout(), cmd.ErrOrStderr()
			if u.force {
				return u.runForce(cmd.Context())
			}
			return u.run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&u.namespace, "namespace", enroll.MemberNamespace, "The fleet namespace on the hub: the manager's --namespace.")
	fs.BoolVar(&u.dryRun, "dry-run", false, "Print what would be removed and kept, and change nothing.")
	fs.BoolVar(&u.keepCopies, "keep-copies", false, "Leave the Propagations' copies in the members, as plain objects (deletion: Orphan).")
	fs.BoolVar(&u.leaveOwed, "leave-owed", false, "Unregister members that are not Ready and owe removals anyway: their copies stay there, named.")
	fs.BoolVar(&u.force, "force", false, "The manager is gone: remove its finalizers and the fleet's hub objects, touching no member; copies stay.")
	fs.DurationVar(&u.timeout, "timeout", 5*time.Minute, "How long to wait for each step (Propagations gone, removals done, MemberClusters gone).")
	fs.StringVar(&u.memberKubeconfig, "member-kubeconfig", "", "Your kubeconfig of the members, with a context named as each member, to delete what register made there. Default: $KUBECONFIG and the default loading rules.")
	return cmd
}

// uninstaller removes one fleet from its hub.
type uninstaller struct {
	hub                                  client.Client
	clock                                clock.PassiveClock
	out, errOut                          io.Writer
	namespace                            string
	memberKubeconfig                     string
	timeout                              time.Duration
	dryRun, keepCopies, leaveOwed, force bool
}

// propagationObject is a Propagation or a ClusterPropagation.
type propagationObject interface {
	client.Object
	// object is the *Propagation or *ClusterPropagation itself, for the
	// client.
	object() client.Object
	spec() *fleetv1alpha1.PropagationSpec
	status() *fleetv1alpha1.PropagationStatus
}

type namespacedPropagation struct{ *fleetv1alpha1.Propagation }
type clusterPropagation struct {
	*fleetv1alpha1.ClusterPropagation
}

func (p namespacedPropagation) object() client.Object                    { return p.Propagation }
func (p clusterPropagation) object() client.Object                       { return p.ClusterPropagation }
func (p namespacedPropagation) spec() *fleetv1alpha1.PropagationSpec     { return &p.Spec }
func (p namespacedPropagation) status() *fleetv1alpha1.PropagationStatus { return &p.Status }
func (p clusterPropagation) spec() *fleetv1alpha1.PropagationSpec        { return &p.Spec }
func (p clusterPropagation) status() *fleetv1alpha1.PropagationStatus    { return &p.Status }

// describe names p as kubectl does: propagation/NAMESPACE/NAME or
// clusterpropagation/NAME.
func describe(p propagationObject) string {
	if _, ok := p.(clusterPropagation); ok {
		return "ClusterPropagation " + p.GetName()
	}
	return "Propagation " + p.GetNamespace() + "/" + p.GetName()
}

// propagations lists the Propagations and ClusterPropagations this fleet
// claimed (fleetv1alpha1.FleetLabel); those of another fleet, and those no
// fleet claimed, which carry no finalizer, are left. A hub without their
// CRDs has none.
func (u *uninstaller) propagations(ctx context.Context) ([]propagationObject, error) {
	ours := client.MatchingLabels{fleetv1alpha1.FleetLabel: u.namespace}
	var props fleetv1alpha1.PropagationList
	if err := u.hub.List(ctx, &props, ours); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing Propagations on the hub: %w", err)
	}
	var cluster fleetv1alpha1.ClusterPropagationList
	if err := u.hub.List(ctx, &cluster, ours); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing ClusterPropagations on the hub: %w", err)
	}
	var all []propagationObject
	for i := range props.Items {
		all = append(all, namespacedPropagation{&props.Items[i]})
	}
	for i := range cluster.Items {
		all = append(all, clusterPropagation{&cluster.Items[i]})
	}
	return all, nil
}

// members lists the MemberClusters of this fleet.
func (u *uninstaller) members(ctx context.Context) ([]fleetv1alpha1.MemberCluster, error) {
	var list fleetv1alpha1.MemberClusterList
	err := u.hub.List(ctx, &list, client.MatchingLabels{fleetv1alpha1.FleetLabel: u.namespace})
	if err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("listing MemberClusters on the hub: %w", err)
	}
	return list.Items, nil
}

// registrations lists the fleet's native registration Secrets, the only
// ones uninstall deletes: the other formats' Secrets belong to Cluster API,
// Argo CD or multicluster-runtime.
func (u *uninstaller) registrations(ctx context.Context) ([]corev1.Secret, error) {
	var list corev1.SecretList
	err := u.hub.List(ctx, &list, client.InNamespace(u.namespace), client.MatchingLabels{registry.KubeconfigLabel: "true"})
	if err != nil {
		return nil, fmt.Errorf("listing registration Secrets in %s on the hub: %w", u.namespace, err)
	}
	return list.Items, nil
}

// clusterName is the name the registration s gives its member.
func clusterName(s *corev1.Secret) string {
	if name := s.Annotations[registry.ClusterNameAnnotation]; name != "" {
		return name
	}
	return s.Name
}

// liveManager names a Lease of the fleet namespace that a running manager
// holds: the leader's (leaderElectionID) or a sharing replica's, renewed
// within its duration. It returns "" when there is none.
func (u *uninstaller) liveManager(ctx context.Context) (string, error) {
	var leases coordinationv1.LeaseList
	if err := u.hub.List(ctx, &leases, client.InNamespace(u.namespace)); err != nil {
		return "", fmt.Errorf("listing Leases in %s on the hub: %w", u.namespace, err)
	}
	now := u.clock.Now()
	for _, l := range leases.Items {
		if l.Name != leaderElectionID && l.Labels[shard.ReplicaLabel] != "true" {
			continue
		}
		s := l.Spec
		if ptr.Deref(s.HolderIdentity, "") == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
			continue
		}
		if now.Before(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds)*time.Second + leaseSkew)) {
			return fmt.Sprintf("Lease %s/%s, held by %s", l.Namespace, l.Name, *s.HolderIdentity), nil
		}
	}
	return "", nil
}

// run is uninstall with a running manager.
func (u *uninstaller) run(ctx context.Context) error {
	id, err := enroll.ReadFleetID(ctx, u.hub, u.namespace)
	if err != nil {
		return err
	}
	props, err := u.propagations(ctx)
	if err != nil {
		return err
	}
	live, err := u.liveManager(ctx)
	if err != nil {
		return err
	}
	if live == "" {
		return fmt.Errorf("no manager of fleet %s is running (no live manager Lease in %s): its Propagations would stay Terminating and its MemberClusters would stay. Start it (with --leader-elect), or, if it is gone for good, run with --force, which leaves the copies in the members", u.namespace, u.namespace)
	}
	if live != "" {
		fmt.Fprintf(u.out, "hub: the manager runs (%s)\n", live)
	}
	if u.dryRun {
		return u.plan(ctx, id, props)
	}

	// 1. The Propagations, and their copies.
	if err := u.deletePropagations(ctx, props); err != nil {
		return err
	}
	if err := u.waitPropagationsGone(ctx); err != nil {
		return err
	}

	// 2. The removals members owe.
	owing, leftOwing, err := u.waitOwed(ctx)
	if err != nil {
		return err
	}

	// 3. The members.
	keptGrants, err := u.unregisterMembers(ctx, id, owing)
	if err != nil {
		return err
	}

	// 4. The hub state the manager made.
	if len(owing) > 0 {
		return fmt.Errorf("kept registered, not Ready and owing removals of copies: %s. The manager carries the removals out once each is Ready: run uninstall again then, or with --leave-owed to leave those copies there", strings.Join(owing, ", "))
	}
	if err := u.mirror(ctx, id, false); err != nil {
		return err
	}
	heldBy := slices.Compact(slices.Sorted(slices.Values(append(keptGrants, leftOwing...))))
	if err := u.deleteIdentity(ctx, id, heldBy); err != nil {
		return err
	}

	// 5. The install.
	return u.printInstallRemoval(ctx)
}

// plan prints what run would do, and changes nothing.
func (u *uninstaller) plan(ctx context.Context, id string, props []propagationObject) error {
	copies := "its copies would be deleted from the members"
	if u.keepCopies {
		copies = "set to deletion: Orphan; its copies would stay in the members, as plain objects"
	}
	for _, p := range props {
		fmt.Fprintf(u.out, "hub: %s would be deleted: %s\n", describe(p), copies)
	}
	members, err := u.members(ctx)
	if err != nil {
		return err
	}
	for _, mc := range members {
		if mc.Status.OwedRemovalCount > 0 {
			fmt.Fprintf(u.out, "member %s owes %d removals (state %s)\n", mc.Name, mc.Status.OwedRemovalCount, mc.Status.State)
		}
	}
	secrets, err := u.registrations(ctx)
	if err != nil {
		return err
	}
	for _, s := range secrets {
		fmt.Fprintf(u.out, "hub: %s would be deleted (unregisters member %s)\n", enroll.Describe(&s), clusterName(&s))
	}
	for _, mc := range members {
		if ref := mc.Spec.SecretRef; ref.Format != fleetv1alpha1.FormatNative || ref.Namespace != u.namespace {
			fmt.Fprintf(u.out, "hub: MemberCluster %s would be kept: its %s Secret %s/%s is not the fleet's to delete; it goes with the CRDs\n", mc.Name, ref.Format, ref.Namespace, ref.Name)
		}
	}
	if id != "" {
		fmt.Fprintf(u.out, "hub: ConfigMap %s/%s would be deleted once no member holds objects labelled %s=%s\n", u.namespace, fleetv1alpha1.FleetIdentityName, fleetv1alpha1.FleetIDLabel, id)
	}
	fmt.Fprintln(u.out, "(dry run: nothing was changed)")
	return nil
}

// deletePropagations deletes props, each first set to deletion: Orphan
// with --keep-copies; ones deleted already are only set.
func (u *uninstaller) deletePropagations(ctx context.Context, props []propagationObject) error {
	for _, p := range props {
		if u.keepCopies && p.spec().Deletion != fleetv1alpha1.DeletionOrphan {
			// The manager writes the Propagation too (its status, labels):
			// a conflict is read again and the change made on what is new.
			err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
				if err := u.hub.Get(ctx, client.ObjectKeyFromObject(p.object()), p.object()); err != nil {
					return err
				}
				if p.spec().Deletion == fleetv1alpha1.DeletionOrphan {
					return nil
				}
				before := p.DeepCopyObject().(client.Object)
				p.spec().Deletion = fleetv1alpha1.DeletionOrphan
				return u.hub.Patch(ctx, p.object(), client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
			})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("setting %s to deletion: Orphan: %w", describe(p), err)
			}
			fmt.Fprintf(u.out, "hub: %s set to deletion: Orphan\n", describe(p))
		}
		if p.GetDeletionTimestamp() != nil {
			continue
		}
		err := u.hub.Delete(ctx, p.object(), client.Preconditions{UID: ptr.To(p.GetUID())})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("deleting %s: %w", describe(p), err)
		}
		fmt.Fprintf(u.out, "hub: %s deleted\n", describe(p))
	}
	return nil
}

// waitPropagationsGone waits until the fleet has no Propagation left,
// deleting those the manager claimed meanwhile, and prints a line each
// time the set it waits for changes.
func (u *uninstaller) waitPropagationsGone(ctx context.Context) error {
	shown := ""
	var left []propagationObject
	err := wait.PollUntilContextTimeout(ctx, uninstallPoll, u.timeout, true, func(ctx context.Context) (bool, error) {
		props, err := u.propagations(ctx)
		if err != nil {
			return false, cutShort(ctx, err)
		}
		left = props
		if err := u.deletePropagations(ctx, left); err != nil {
			return false, err
		}
		if line := waitingFor(left); line != shown {
			shown = line
			if line != "" {
				fmt.Fprintln(u.out, line)
			}
		}
		return len(left) == 0, nil
	})
	if !wait.Interrupted(err) {
		return err
	}
	why := "the manager is still removing their copies, or its members are slow to answer"
	if live, err := u.liveManager(ctx); err == nil && live == "" {
		why = "no manager of the fleet runs any more (no live Lease): if it is gone for good, run uninstall --force, which leaves their copies in the members"
	}
	return fmt.Errorf("after %s, %s: %s", u.timeout, waitingFor(left), why)
}

// waitingFor says which Propagations are still there, and what holds
// them.
func waitingFor(left []propagationObject) string {
	if len(left) == 0 {
		return ""
	}
	names := make([]string, 0, len(left))
	for i, p := range left {
		if i == 10 {
			names = append(names, fmt.Sprintf("and %d more", len(left)-i))
			break
		}
		names = append(names, describe(p))
	}
	return fmt.Sprintf("waiting for %d %s to go (held by %s until the manager removed their copies): %s",
		len(left), oneOrMany(len(left), "Propagation", "Propagations"), fleetv1alpha1.PropagationFinalizer, strings.Join(names, ", "))
}

// waitOwed waits until no Ready member of the fleet owes a removal, and
// returns the members that are not Ready and owe some: their removals are
// carried out once they are Ready, which uninstall does not wait for.
// With --leave-owed, it names their removals as left, and returns them as
// left instead: their copies stay, labelled with the fleet's identity.
func (u *uninstaller) waitOwed(ctx context.Context) (owing, left []string, err error) {
	var waiting []string
	shown := ""
	err = wait.PollUntilContextTimeout(ctx, uninstallPoll, u.timeout, true, func(ctx context.Context) (bool, error) {
		members, err := u.members(ctx)
		if err != nil {
			return false, cutShort(ctx, err)
		}
		owing, waiting = nil, nil
		for _, mc := range members {
			switch {
			case mc.Status.OwedRemovalCount == 0:
			case mc.Status.State == fleetv1alpha1.MemberStateReady:
				waiting = append(waiting, mc.Name)
			default:
				owing = append(owing, mc.Name)
			}
		}
		if line := strings.Join(waiting, ", "); line != shown && line != "" {
			shown = line
			fmt.Fprintf(u.out, "waiting for %s to carry out owed removals\n", line)
		}
		return len(waiting) == 0, nil
	})
	if wait.Interrupted(err) {
		return nil, nil, fmt.Errorf("after %s, %s still owe removals of copies", u.timeout, strings.Join(waiting, ", "))
	}
	if err != nil || !u.leaveOwed {
		return owing, nil, err
	}
	members, err := u.members(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, mc := range members {
		if slices.Contains(owing, mc.Name) {
			u.warnOwed(&mc, "--leave-owed")
		}
	}
	return nil, owing, nil
}

// cutShort is err, or nil when ctx ended: a wait's read cut short by its
// own deadline is the wait timing out, which the caller says in its words.
func cutShort(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// unregisterMembers deletes the fleet's registration Secrets but those of
// the members in keep, waits until their MemberClusters are gone, and
// deletes, in each member your kubeconfig has a context of the member's
// name for, what register made there. It returns the members that may
// still hold objects labelled with the fleet's identity.
func (u *uninstaller) unregisterMembers(ctx context.Context, id string, keep []string) ([]string, error) {
	secrets, err := u.registrations(ctx)
	if err != nil {
		return nil, err
	}
	deleted := map[string]*corev1.Secret{}
	for i := range secrets {
		s := &secrets[i]
		name := clusterName(s)
		if slices.Contains(keep, name) {
			continue
		}
		got, err := enroll.Unregister(ctx, u.hub, u.namespace, s.Name)
		if errors.Is(err, enroll.ErrNotRegistered) {
			continue
		}
		if err != nil {
			return nil, err
		}
		deleted[name] = got
		fmt.Fprintf(u.out, "hub: %s deleted (member %s unregistered)\n", enroll.Describe(got), name)
	}
	if err := u.waitMembersGone(ctx, slices.Sorted(maps.Keys(deleted))); err != nil {
		return nil, err
	}
	members, err := u.members(ctx)
	if err != nil {
		return nil, err
	}
	for _, mc := range members {
		if ref := mc.Spec.SecretRef; !slices.Contains(keep, mc.Name) {
			fmt.Fprintf(u.out, "hub: MemberCluster %s kept: its %s Secret %s/%s is not the fleet's to delete; it goes with the CRDs, once the manager is removed\n", mc.Name, ref.Format, ref.Namespace, ref.Name)
		}
	}
	return u.cleanupMembers(ctx, id, deleted)
}

// waitMembersGone waits until the manager has removed the MemberClusters
// names.
func (u *uninstaller) waitMembersGone(ctx context.Context, names []string) error {
	var left []string
	err := wait.PollUntilContextTimeout(ctx, uninstallPoll, u.timeout, true, func(ctx context.Context) (bool, error) {
		members, err := u.members(ctx)
		if err != nil {
			return false, cutShort(ctx, err)
		}
		left = nil
		for _, mc := range members {
			if slices.Contains(names, mc.Name) {
				left = append(left, mc.Name)
			}
		}
		return len(left) == 0, nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("after %s, the MemberClusters of %s are still there: is the manager running?", u.timeout, strings.Join(left, ", "))
	}
	return err
}

// cleanupMembers deletes, in each member of registrations (by name) that
// your kubeconfig has a context of the member's name for, what register
// made there for this fleet, as "unregister --cleanup" does. It returns
// the members it did not clean up, each named with the command that does.
func (u *uninstaller) cleanupMembers(ctx context.Context, id string, registrations map[string]*corev1.Secret) ([]string, error) {
	if id == "" || len(registrations) == 0 {
		return nil, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = u.memberKubeconfig
	raw, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).RawConfig()
	if err != nil && !clientcmd.IsEmptyConfig(err) {
		return nil, fmt.Errorf("loading your member kubeconfig: %w", err)
	}
	var kept []string
	for _, name := range slices.Sorted(maps.Keys(registrations)) {
		keep := func(why string) {
			kept = append(kept, name)
			fmt.Fprintf(u.out, "member %s: what register made there is kept: %s; to remove it: fleet-manager unregister %s --cleanup --member-context=<its context> -n %s\n", name, why, name, u.namespace)
		}
		if _, ok := raw.Contexts[name]; !ok {
			keep("your kubeconfig has no context " + name)
			continue
		}
		cfg, err := personConfig("member", u.memberKubeconfig, name, nil)
		if err != nil {
			keep(err.Error())
			continue
		}
		changes, err := enroll.Cleanup(ctx, cfg, name, id, registrations[name])
		for _, c := range changes {
			line := fmt.Sprintf("member %s: %s %s", name, enroll.Describe(c.Object), c.Op)
			if c.Reason != "" {
				line += ": " + c.Reason
			}
			fmt.Fprintln(u.out, line)
		}
		if err != nil {
			keep(err.Error())
		}
	}
	return kept, nil
}

// mirror deletes, or with a manager running (!del) names as kept, the
// fleet's ConfigMaps of the owed removals' mirror: the manager deletes
// one once it is empty, and keeps the removals owed by members
// unregistered with --leave-owed there a while, in case they come back.
func (u *uninstaller) mirror(ctx context.Context, id string, del bool) error {
	for _, name := range propagation.OwedRemovalsConfigMaps() {
		cm := &corev1.ConfigMap{}
		err := u.hub.Get(ctx, client.ObjectKey{Namespace: u.namespace, Name: name}, cm)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading ConfigMap %s/%s on the hub: %w", u.namespace, name, err)
		}
		if id == "" || cm.Labels[fleetv1alpha1.FleetIDLabel] != id {
			continue // not this fleet's
		}
		if !del {
			fmt.Fprintf(u.out, "hub: ConfigMap %s/%s kept: the manager keeps removals owed by members unregistered with --leave-owed there; it goes with the namespace\n", u.namespace, name)
			continue
		}
		if err := u.hub.Delete(ctx, cm, client.Preconditions{UID: ptr.To(cm.UID)}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting ConfigMap %s/%s on the hub: %w", u.namespace, name, err)
		}
		fmt.Fprintf(u.out, "hub: ConfigMap %s/%s deleted (the mirror of removals owed by members no longer registered)\n", u.namespace, name)
	}
	return nil
}

// deleteIdentity deletes the fleet's identity, unless the members
// heldBy may still hold objects labelled with it: it is what proves them
// the fleet's, to "unregister --cleanup".
func (u *uninstaller) deleteIdentity(ctx context.Context, id string, heldBy []string) error {
	if id == "" {
		return nil
	}
	if len(heldBy) > 0 {
		fmt.Fprintf(u.out, "hub: ConfigMap %s/%s kept: %s may still hold objects labelled %s=%s, which it proves the fleet's; delete it once they are cleaned up\n",
			u.namespace, fleetv1alpha1.FleetIdentityName, strings.Join(heldBy, ", "), fleetv1alpha1.FleetIDLabel, id)
		return nil
	}
	cm := &corev1.ConfigMap{}
	err := u.hub.Get(ctx, client.ObjectKey{Namespace: u.namespace, Name: fleetv1alpha1.FleetIdentityName}, cm)
	if err == nil {
		err = u.hub.Delete(ctx, cm, client.Preconditions{UID: ptr.To(cm.UID)})
	}
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the fleet's identity, ConfigMap %s/%s: %w", u.namespace, fleetv1alpha1.FleetIdentityName, err)
	}
	fmt.Fprintf(u.out, "hub: ConfigMap %s/%s deleted (fleet identity %s)\n", u.namespace, fleetv1alpha1.FleetIdentityName, id)
	return nil
}

// printInstallRemoval prints what removes the install: helm uninstall
// and the CRDs when a Helm release made the manager's Deployment, else
// kubectl delete -k.
func (u *uninstaller) printInstallRemoval(ctx context.Context) error {
	var deployments appsv1.DeploymentList
	if err := u.hub.List(ctx, &deployments, client.InNamespace(u.namespace)); err != nil && !apierrors.IsForbidden(err) {
		return fmt.Errorf("listing Deployments in %s on the hub: %w", u.namespace, err)
	}
	release := ""
	for _, d := range deployments.Items {
		if d.Labels["app.kubernetes.io/managed-by"] == "Helm" && d.Labels["app.kubernetes.io/name"] == "fleet-manager" {
			release = d.Annotations["meta.helm.sh/release-name"]
		}
	}
	fmt.Fprintln(u.out, "The fleet is removed. To remove the install:")
	if release != "" {
		fmt.Fprintf(u.out, "  helm uninstall %s -n %s\n", release, u.namespace)
		fmt.Fprintln(u.out, "  kubectl delete -f charts/fleet-manager/crds/   # helm keeps CRDs; only when no other fleet uses them")
		fmt.Fprintf(u.out, "  kubectl delete namespace %s                     # its Leases and Events\n", u.namespace)
		return nil
	}
	fmt.Fprintln(u.out, "  kubectl delete -k deploy/   # the manager, its RBAC, namespace and CRDs; keep deploy/crd when another fleet uses them")
	return nil
}

// runForce lets go what the gone manager left: it removes the manager's
// finalizer from the fleet's Propagations (deleting them), and deletes
// its registration Secrets, MemberClusters and owed removals' mirror.
// It touches no member, and keeps the fleet's identity, which proves the
// copies and grants left in the members the fleet's.
func (u *uninstaller) runForce(ctx context.Context) error {
	live, err := u.liveManager(ctx)
	if err != nil {
		return err
	}
	if live != "" {
		return fmt.Errorf("a manager of fleet %s runs (%s): uninstall without --force has it remove the copies; stop it first to use --force", u.namespace, live)
	}
	id, err := enroll.ReadFleetID(ctx, u.hub, u.namespace)
	if err != nil {
		return err
	}
	props, err := u.propagations(ctx)
	if err != nil {
		return err
	}
	verb := map[bool]string{true: "would be ", false: ""}[u.dryRun]
	for _, p := range props {
		fmt.Fprintf(u.out, "hub: %s %slet go; %s\n", describe(p), verb, copiesLeft(p, id))
		if u.dryRun {
			continue
		}
		if p.GetDeletionTimestamp() == nil {
			if err := u.hub.Delete(ctx, p.object(), client.Preconditions{UID: ptr.To(p.GetUID())}); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s: %w", describe(p), err)
			}
		}
		if err := u.removeFinalizer(ctx, p); err != nil {
			return err
		}
	}
	members, err := u.members(ctx)
	if err != nil {
		return err
	}
	for i := range members {
		u.warnOwed(&members[i], "--force")
	}
	secrets, err := u.registrations(ctx)
	if err != nil {
		return err
	}
	for i := range secrets {
		fmt.Fprintf(u.out, "hub: %s %sdeleted (member %s)\n", enroll.Describe(&secrets[i]), verb, clusterName(&secrets[i]))
		if !u.dryRun {
			if _, err := enroll.Unregister(ctx, u.hub, u.namespace, secrets[i].Name); err != nil && !errors.Is(err, enroll.ErrNotRegistered) {
				return err
			}
		}
	}
	for i := range members {
		fmt.Fprintf(u.out, "hub: MemberCluster %s %sdeleted\n", members[i].Name, verb)
		if !u.dryRun {
			err := u.hub.Delete(ctx, &members[i], client.Preconditions{UID: ptr.To(members[i].UID)})
			if client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting MemberCluster %s: %w", members[i].Name, err)
			}
		}
	}
	if u.dryRun {
		fmt.Fprintln(u.out, "(dry run: nothing was changed)")
		return nil
	}
	if err := u.mirror(ctx, id, true); err != nil {
		return err
	}
	if id != "" {
		fmt.Fprintf(u.out, "hub: ConfigMap %s/%s kept: the copies and what register made in the members carry %s=%s, which it proves the fleet's; delete it once they are cleaned up\n",
			u.namespace, fleetv1alpha1.FleetIdentityName, fleetv1alpha1.FleetIDLabel, id)
	}
	return u.printInstallRemoval(ctx)
}

// copiesLeft says where p's copies may stay, from its status, and the
// labels that select them in a member.
func copiesLeft(p propagationObject, id string) string {
	st := p.status()
	var kinds []string
	for _, k := range st.Kinds {
		kinds = append(kinds, k.Kind)
	}
	where := fmt.Sprintf("its copies stay in the members it selected (%d, applied in %d", st.Selected, st.Applied)
	if len(kinds) > 0 {
		where += ", kinds " + strings.Join(kinds, ", ")
	}
	selector := fmt.Sprintf("%s=%s", fleetv1alpha1.PropagationLabel, p.GetName())
	if id != "" {
		selector += fmt.Sprintf(",%s=%s", fleetv1alpha1.FleetIDLabel, id)
	}
	return where + "), labelled " + selector
}

// removeFinalizer removes the manager's finalizer from p, and only it,
// from p as the hub has it now (a delete just sent has changed it).
func (u *uninstaller) removeFinalizer(ctx context.Context, p propagationObject) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := u.hub.Get(ctx, client.ObjectKeyFromObject(p.object()), p.object()); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(p, fleetv1alpha1.PropagationFinalizer) {
			return nil
		}
		before := p.DeepCopyObject().(client.Object)
		controllerutil.RemoveFinalizer(p, fleetv1alpha1.PropagationFinalizer)
		return u.hub.Patch(ctx, p.object(), client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing finalizer %s from %s: %w", fleetv1alpha1.PropagationFinalizer, describe(p), err)
	}
	return nil
}

// warnOwed names the removals mc owes, which will not be carried out: the
// copies stay in the member.
func (u *uninstaller) warnOwed(mc *fleetv1alpha1.MemberCluster, flag string) {
	for _, o := range mc.Status.OwedRemovals {
		fmt.Fprintf(u.errOut, "Warning: member %s (%s) owed the removal of the copies of %s: they stay there (%s)\n", mc.Name, mc.Status.State, o.Propagation, flag)
	}
	if n := mc.Status.OwedRemovalCount - int32(len(mc.Status.OwedRemovals)); n > 0 {
		fmt.Fprintf(u.errOut, "Warning: member %s owed %d more removals: their copies stay there (%s)\n", mc.Name, n, flag)
	}
}

// oneOrMany is one when n is 1, else many.
func oneOrMany(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
