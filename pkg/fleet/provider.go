package fleet

import (
	"context"
	"errors"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/pkg/cluster"
)

// provider is the hub controller that turns registration Secrets into
// members of the pool.
type provider struct {
	client    client.Reader
	pool      *cluster.Pool
	recorder  events.EventRecorder
	namespace string

	// mu guards names: the cluster name each Secret registered, so that a
	// deleted Secret, whose annotations are gone, still finds its member.
	mu    sync.Mutex
	names map[types.NamespacedName]string
}

func addProvider(m *Manager) error {
	p := &provider{
		client:    m.GetClient(),
		pool:      m.pool,
		recorder:  m.GetEventRecorder("fleet-manager"),
		namespace: m.namespace,
		names:     map[types.NamespacedName]string{},
	}
	inFleet := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == p.namespace && o.GetLabels()[cluster.KubeconfigLabel] == "true"
	})
	return builder.ControllerManagedBy(m.Manager).
		Named("fleet-registrations").
		For(&corev1.Secret{}, builder.WithPredicates(inFleet)).
		Complete(p)
}

func (p *provider) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	secret := &corev1.Secret{}
	err := p.client.Get(ctx, req.NamespacedName, secret)
	if apierrors.IsNotFound(err) || err == nil && !secret.DeletionTimestamp.IsZero() {
		p.forget(ctx, req.NamespacedName)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}

	reg, err := cluster.FromSecret(secret)
	p.mu.Lock()
	previous, known := p.names[req.NamespacedName]
	p.names[req.NamespacedName] = reg.ClusterName
	p.mu.Unlock()
	if known && previous != reg.ClusterName {
		p.pool.Remove(previous)
	}
	if err == nil {
		err = p.pool.Set(reg)
	} else {
		p.pool.Remove(reg.ClusterName)
	}
	if refused, ok := errors.AsType[*cluster.RefusedError](err); ok {
		logf.FromContext(ctx).Error(err, "Registration refused", "cluster", reg.ClusterName, "reason", refused.Reason)
		p.recorder.Eventf(secret, nil, corev1.EventTypeWarning, refused.Reason, "Register", "%s", refused.Message)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	logf.FromContext(ctx).V(1).Info("Registration accepted", "cluster", reg.ClusterName)
	return reconcile.Result{}, nil
}

func (p *provider) forget(ctx context.Context, key types.NamespacedName) {
	p.mu.Lock()
	name, ok := p.names[key]
	delete(p.names, key)
	p.mu.Unlock()
	if ok && p.pool.Remove(name) {
		logf.FromContext(ctx).Info("Registration removed", "cluster", name)
	}
}
