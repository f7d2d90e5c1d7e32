package enroll

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// ErrNoCRD: the hub does not serve MemberClusters.
var ErrNoCRD = errors.New("the hub has no MemberCluster CRD")

// ErrNotRegistered: the hub has no registration Secret of that name.
var ErrNotRegistered = errors.New("not registered")

// pollInterval is how often the waits read the MemberCluster.
const pollInterval = 250 * time.Millisecond

// CheckCRD returns ErrNoCRD when the hub does not serve MemberClusters.
func CheckCRD(ctx context.Context, hub client.Client) error {
	err := hub.List(ctx, &fleetv1alpha1.MemberClusterList{}, client.Limit(1))
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return ErrNoCRD
	}
	if err != nil {
		return fmt.Errorf("listing MemberClusters on the hub: %w", err)
	}
	return nil
}

// NotReadyError: the MemberCluster did not become Ready.
type NotReadyError struct {
	Name string
	// Member is the MemberCluster as last read; nil if there was none.
	Member *fleetv1alpha1.MemberCluster
	Err    error
	// Stale says why Member's recorded state is not current (no manager
	// probes it), as `get members` judges it, which then shows the state
	// Unknown; "" when it is current.
	Stale string
}

func (e *NotReadyError) Error() string {
	switch {
	case e.Member == nil:
		return fmt.Sprintf("MemberCluster %s was not created (is a manager running for this fleet?): %v", e.Name, e.Err)
	case e.Stale != "":
		return fmt.Sprintf("MemberCluster %s is not Ready: %v: state Unknown (%s); it records %s", e.Name, e.Err, e.Stale, Reason(e.Member))
	}
	return fmt.Sprintf("MemberCluster %s is not Ready: %v: %s", e.Name, e.Err, Reason(e.Member))
}
func (e *NotReadyError) Unwrap() error { return e.Err }

// Reason says in one line why mc is in its state: the Ready condition and
// the last error.
func Reason(mc *fleetv1alpha1.MemberCluster) string {
	parts := []string{"state " + string(mc.Status.State)}
	if mc.Status.State == "" {
		parts[0] = "no status yet"
	}
	if c := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionReady); c != nil {
		parts = append(parts, fmt.Sprintf("Ready %s (%s: %s)", c.Status, c.Reason, c.Message))
	}
	if c := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsAccepted); c != nil && c.Status == metav1.ConditionFalse {
		parts = append(parts, fmt.Sprintf("CredentialsAccepted False (%s: %s)", c.Reason, c.Message))
	}
	if mc.Status.LastError != "" {
		parts = append(parts, "last error: "+mc.Status.LastError)
	}
	return strings.Join(parts, "; ")
}

// WaitReady waits up to timeout until the MemberCluster name of the fleet
// of namespace is Ready, and returns it. progress is called with its state
// each time that changes. A MemberCluster of that name labelled for
// another fleet is not this fleet's: it counts as none. A kubeconfig the
// manager's policy refused fails at once, as waiting would not change it;
// other failures are a *NotReadyError after timeout.
func WaitReady(ctx context.Context, hub client.Client, namespace, name string, timeout time.Duration, progress func(state string)) (*fleetv1alpha1.MemberCluster, error) {
	var last *fleetv1alpha1.MemberCluster
	shown := ""
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		var mc fleetv1alpha1.MemberCluster
		err := hub.Get(ctx, client.ObjectKey{Name: name}, &mc)
		state := "not created yet"
		switch {
		case apierrors.IsNotFound(err):
		case err == nil && mc.Labels[fleetv1alpha1.FleetLabel] != namespace:
			state = fmt.Sprintf("not created yet (the MemberCluster of that name is fleet %q's)", mc.Labels[fleetv1alpha1.FleetLabel])
		case meta.IsNoMatchError(err):
			return false, ErrNoCRD
		case err != nil:
			return false, nil // the hub may blink; the timeout bounds it
		default:
			last = &mc
			state = string(mc.Status.State)
			if state == "" {
				state = "no status yet"
			}
		}
		if state != shown {
			shown = state
			progress(state)
		}
		if last == nil {
			return false, nil
		}
		if last.Status.State == fleetv1alpha1.MemberStateReady && meta.IsStatusConditionTrue(last.Status.Conditions, fleetv1alpha1.ConditionReady) {
			return true, nil
		}
		if refusedByPolicy(last) {
			return false, errors.New("the manager refused its kubeconfig")
		}
		return false, nil
	})
	if errors.Is(err, ErrNoCRD) {
		return nil, err
	}
	if err != nil {
		if wait.Interrupted(err) {
			err = fmt.Errorf("not Ready within %s", timeout)
		}
		return nil, &NotReadyError{Name: name, Member: last, Err: err}
	}
	return last, nil
}

// refusedByPolicy: the manager's kubeconfig policy refused the Secret,
// rather than the member its credentials.
func refusedByPolicy(mc *fleetv1alpha1.MemberCluster) bool {
	c := meta.FindStatusCondition(mc.Status.Conditions, fleetv1alpha1.ConditionCredentialsAccepted)
	return c != nil && c.Status == metav1.ConditionFalse &&
		c.Reason != fleetv1alpha1.ReasonUnauthorized && c.Reason != fleetv1alpha1.ReasonForbidden
}

// Unregister deletes the registration Secret name in namespace on the
// hub, and returns it. It refuses a Secret without the native
// registration label, and returns ErrNotRegistered if there is none.
func Unregister(ctx context.Context, hub client.Client, namespace, name string) (*corev1.Secret, error) {
	var s corev1.Secret
	err := hub.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &s)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("no Secret %s/%s on the hub: %w", namespace, name, ErrNotRegistered)
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s on the hub: %w", namespace, name, err)
	}
	if s.Labels[registry.KubeconfigLabel] != "true" {
		return nil, fmt.Errorf("Secret %s/%s on the hub is not a registration (no label %s=true): refusing to delete it", namespace, name, registry.KubeconfigLabel)
	}
	err = hub.Delete(ctx, &s, client.Preconditions{UID: ptr.To(s.UID), ResourceVersion: ptr.To(s.ResourceVersion)})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("deleting Secret %s/%s on the hub: %w", namespace, name, err)
	}
	return &s, nil
}

// WaitGone waits up to timeout until the hub has no MemberCluster name of
// the fleet of namespace; one labelled for another fleet does not count.
// A hub without the CRD has none.
func WaitGone(ctx context.Context, hub client.Client, namespace, name string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		var mc fleetv1alpha1.MemberCluster
		err := hub.Get(ctx, client.ObjectKey{Name: name}, &mc)
		return apierrors.IsNotFound(err) || meta.IsNoMatchError(err) || (err == nil && mc.Labels[fleetv1alpha1.FleetLabel] != namespace), nil
	})
	if wait.Interrupted(err) {
		return fmt.Errorf("MemberCluster %s is still there after %s: is a manager running for this fleet?", name, timeout)
	}
	return err
}

// ReadFleetID returns the identity of the fleet of namespace on the hub,
// or "" when it has none yet; unlike registry.FleetID it creates none.
func ReadFleetID(ctx context.Context, hub client.Client, namespace string) (string, error) {
	err := hub.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fleetv1alpha1.FleetIdentityName}, &corev1.ConfigMap{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the fleet's identity, ConfigMap %s/%s on the hub: %w", namespace, fleetv1alpha1.FleetIdentityName, err)
	}
	return registry.FleetID(ctx, hub, hub, namespace)
}

// WriteYAML writes objs to w as a YAML stream, "---" between them, without
// managed fields.
func WriteYAML(w io.Writer, objs []client.Object) error {
	for i, obj := range objs {
		obj = obj.DeepCopyObject().(client.Object)
		obj.SetManagedFields(nil)
		if err := setKind(obj); err != nil {
			return err
		}
		data, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return nil
}
