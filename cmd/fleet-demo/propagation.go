package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1alpha1 "github.com/fleetkube/fleet-manager/api/v1alpha1"
)

// The Propagation the demo creates on the hub, and the ConfigMap it copies.
const (
	demoPropagation = "settings"
	demoAppLabel    = "app"
)

// showPropagation walks through a Propagation: a hub ConfigMap copied to
// every member, an override that gives each copy its member's name, an
// edit of a copy corrected, and the copies removed when
// the hub ConfigMap stops matching. Each step is one line, and waits at
// most the timeout flag.
func (d *demo) showPropagation(ctx context.Context, hub *cluster, members []*cluster) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := fleetv1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	hubClient, err := client.New(hub.env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	memberClients := make([]client.Client, len(members))
	for i, m := range members {
		if memberClients[i], err = client.New(m.env.Config, client.Options{}); err != nil {
			return err
		}
	}
	key := client.ObjectKey{Namespace: demoNamespace, Name: demoPropagation}
	if err := hubClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s on the hub: %w", demoNamespace, err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: demoPropagation, Labels: map[string]string{demoAppLabel: "demo"}},
		Data:       map[string]string{"color": "blue"},
	}
	if err := hubClient.Create(ctx, cm); err != nil {
		return fmt.Errorf("creating ConfigMap %s on the hub: %w", key, err)
	}
	p := &fleetv1alpha1.Propagation{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: demoPropagation},
		Spec: fleetv1alpha1.PropagationSpec{
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Selector: &metav1.LabelSelector{MatchLabels: cm.Labels}}},
		},
	}
	if err := hubClient.Create(ctx, p); err != nil {
		return fmt.Errorf("creating Propagation %s on the hub: %w", key, err)
	}
	d.say("created ConfigMap %s (app=demo) and Propagation %s on the hub, selecting every member", key, key)

	if err := d.waitFor(ctx, "the copies of "+key.String(), func(ctx context.Context) bool {
		return d.everyCopy(ctx, memberClients, key, func(c *corev1.ConfigMap) bool { return c != nil && c.Data["color"] == "blue" }) &&
			hubClient.Get(ctx, key, p) == nil && meta.IsStatusConditionTrue(p.Status.Conditions, fleetv1alpha1.PropagationReady)
	}); err != nil {
		return err
	}
	d.say("propagated: ConfigMap %s is in %s and %s; Propagation %s is Ready", key, members[0].name, members[1].name, key)

	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := hubClient.Get(ctx, key, p); err != nil {
			return err
		}
		p.Spec.Overrides = []fleetv1alpha1.Override{{
			Name:       "member-name",
			Target:     fleetv1alpha1.OverrideTarget{APIVersion: "v1", Kind: "ConfigMap"},
			MergePatch: &apiextensionsv1.JSON{Raw: []byte(`{"data":{"member":"${MEMBER_NAME}"}}`)},
		}}
		return hubClient.Update(ctx, p)
	}); err != nil {
		return fmt.Errorf("adding an override to Propagation %s: %w", key, err)
	}
	d.say("added an override to Propagation %s: each member's copy gets data.member, its own name", key)
	for i, m := range members {
		if err := d.waitFor(ctx, "the override in "+m.name, func(ctx context.Context) bool {
			return d.everyCopy(ctx, memberClients[i:i+1], key, func(c *corev1.ConfigMap) bool { return c != nil && c.Data["member"] == m.name })
		}); err != nil {
			return err
		}
	}
	d.say("overridden: the copy in %s has member=%q, the one in %s member=%q", members[0].name, members[0].name, members[1].name, members[1].name)

	edited := &corev1.ConfigMap{}
	if err := memberClients[0].Get(ctx, key, edited); err != nil {
		return err
	}
	edited.Data["color"] = "red"
	if err := memberClients[0].Update(ctx, edited); err != nil {
		return fmt.Errorf("editing the copy in %s: %w", members[0].name, err)
	}
	d.say("edited the copy in %s: color=\"red\"", members[0].name)
	if err := d.waitFor(ctx, "the correction in "+members[0].name, func(ctx context.Context) bool {
		return d.everyCopy(ctx, memberClients[:1], key, func(c *corev1.ConfigMap) bool { return c != nil && c.Data["color"] == "blue" })
	}); err != nil {
		return err
	}
	d.say("corrected: the copy in %s is color=\"blue\" again", members[0].name)

	if err := hubClient.Get(ctx, key, cm); err != nil {
		return err
	}
	delete(cm.Labels, demoAppLabel)
	if err := hubClient.Update(ctx, cm); err != nil {
		return fmt.Errorf("taking label %s off ConfigMap %s on the hub: %w", demoAppLabel, key, err)
	}
	d.say("took label %s off ConfigMap %s on the hub", demoAppLabel, key)
	if err := d.waitFor(ctx, "the removal of the copies", func(ctx context.Context) bool {
		return d.everyCopy(ctx, memberClients, key, func(c *corev1.ConfigMap) bool { return c == nil })
	}); err != nil {
		return err
	}
	d.say("removed: no member holds a copy of %s any more", key)
	d.reportCopies.Store(true)
	return nil
}

// everyCopy reports whether ok holds for ConfigMap key, nil if absent, in
// every member.
func (d *demo) everyCopy(ctx context.Context, members []client.Client, key client.ObjectKey, ok func(*corev1.ConfigMap) bool) bool {
	for _, m := range members {
		cm := &corev1.ConfigMap{}
		err := m.Get(ctx, key, cm)
		switch {
		case apierrors.IsNotFound(err):
			cm = nil
		case err != nil:
			return false
		}
		if !ok(cm) {
			return false
		}
	}
	return true
}

// waitFor polls done until it holds, within the timeout flag.
func (d *demo) waitFor(ctx context.Context, what string, done func(ctx context.Context) bool) error {
	ctx, cancel := context.WithTimeout(ctx, d.flags.timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) { return done(ctx), nil })
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("waiting for %s: not within %s", what, d.flags.timeout)
	}
	return err
}
