package propagation

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/cluster"
	"github.com/fleetkube/fleet-manager/pkg/journal"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// releaseTimeout bounds how long a deleted Propagation waits for a Ready
// member to report the removal of its copies; after it, the member owes
// the removal, and the Propagation goes.
const releaseTimeout = 30 * time.Second

// journalCopy is the journal's entry of a copy.
func journalCopy(obj *unstructured.Unstructured) journal.Copy {
	return journal.Copy{
		Object:      journal.Object{GVK: obj.GroupVersionKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()},
		Propagation: obj.GetLabels()[fleetv1alpha1.PropagationLabel],
		Hash:        obj.GetAnnotations()[fleetv1alpha1.ContentHashAnnotation],
	}
}

// replayOwed carries out the removals mc's member owes before any other
// request of the member: once after it is engaged, and once after each
// time it is Ready again.
func (r *reconciler) replayOwed(ctx context.Context, mc *memberCopies, id string) error {
	mc.replayMu.Lock()
	defer mc.replayMu.Unlock()
	if mc.replayed {
		return nil
	}
	owed, err := r.journal.Owed(mc.name)
	if err != nil {
		return fmt.Errorf("reading the removals the member owes: %w", err)
	}
	for _, o := range owed {
		key := propagationKey{Namespace: o.Namespace, Name: o.Propagation}
		if _, err := r.reconcileCopies(ctx, mc, key, id); err != nil {
			return fmt.Errorf("removing the copies of Propagation %s the member owes: %w", key, err)
		}
	}
	if len(owed) > 0 {
		logf.FromContext(ctx).Info("Owed removals carried out", "propagations", len(owed))
		r.countOwed(mc.name)
	}
	mc.replayed = true
	return nil
}

// owe records that member owes the removal of p's copies: in the journal
// first, so that nothing on the hub is released before it is on disk.
func (r *reconciler) owe(ctx context.Context, p *fleetv1alpha1.Propagation, member, message string) error {
	key := client.ObjectKeyFromObject(p)
	if err := r.journal.Owe(member, journal.Owed{Namespace: key.Namespace, Propagation: key.Name, Kinds: kindsOf(p), Reason: message}); err != nil {
		return fmt.Errorf("recording in the journal that member %s owes the removal of copies: %w", member, err)
	}
	if r.results.owe(key, member, message, kindsOf(p)) {
		logf.FromContext(ctx).V(1).Info("Removal of copies owed", "member", member)
	}
	r.countOwed(member)
	return nil
}

// countOwed tells fleet_propagation_owed_deletions and the registry, and
// so the member's MemberCluster, of the removals member owes.
func (r *reconciler) countOwed(member string) {
	owed, err := r.journal.Owed(member)
	if err != nil {
		return
	}
	r.metrics.owedDeletions.WithLabelValues(member).Set(float64(len(owed)))
	var removals []registry.OwedRemoval
	for _, o := range owed {
		removals = append(removals, registry.OwedRemoval{Namespace: o.Namespace, Propagation: o.Propagation, Reason: o.Reason, Since: o.Decided})
	}
	r.m.Registry().ObserveOwed(member, removals)
}

// release lets a deleted Propagation go once every member has removed its
// copies or owes their removal: a member that is not Ready, that failed to
// remove them, or that did not report within releaseTimeout.
func (r *reconciler) release(ctx context.Context, p *fleetv1alpha1.Propagation, members []*registry.Cluster) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(p, fleetv1alpha1.PropagationFinalizer) {
		return reconcile.Result{}, nil
	}
	key := client.ObjectKeyFromObject(p)
	results := r.results.of(key)
	timedOut := time.Since(p.DeletionTimestamp.Time) > releaseTimeout
	var waiting, owed []string
	for _, c := range members {
		res, has := results[c.Name]
		switch {
		case has && res.removing && res.copies == 0 && res.result != fleetv1alpha1.ResultFailed:
		case c.State != cluster.StateReady:
			if err := r.owe(ctx, p, c.Name, fmt.Sprintf("the member is %s: its copies are removed when it is Ready", c.State)); err != nil {
				return reconcile.Result{}, err
			}
			owed = append(owed, c.Name)
		case has && res.removing && res.result == fleetv1alpha1.ResultFailed, timedOut:
			if err := r.owe(ctx, p, c.Name, "removing the copies failed: "+res.message); err != nil {
				return reconcile.Result{}, err
			}
			owed = append(owed, c.Name)
		default:
			waiting = append(waiting, c.Name)
		}
	}
	if len(waiting) > 0 {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	before := p.DeepCopy()
	controllerutil.RemoveFinalizer(p, fleetv1alpha1.PropagationFinalizer)
	if err := r.hub.Patch(ctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if len(owed) > 0 {
		logf.FromContext(ctx).Info("Propagation deleted; members owe the removal of its copies", "members", owed)
		r.recorder.Eventf(p, nil, corev1.EventTypeWarning, fleetv1alpha1.ReasonDeletionOwed, "Delete",
			"%d members owe the removal of copies, done when each is Ready: %s", len(owed), strings.Join(owed, ", "))
	}
	return reconcile.Result{}, nil
}
