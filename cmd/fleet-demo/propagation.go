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
// edit of a copy corrected, a change rolled out a member at a time and
// rolled back, and the copies removed when the hub ConfigMap stops
// matching. Each step is one line, and waits at
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
			Resources: []fleetv1alpha1.ResourceSelector{{APIVersion: "v1", Kind: "ConfigMap", Selector: fleetv1alpha1.SetAsLabelSelector(cm.Labels)}},
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

	if err := d.showRollout(ctx, hubClient, memberClients, members, key, cm); err != nil {
		return err
	}

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

// showRollout rolls a change out progressively, a member at a time, each
// Available for minSuccessTime before the next, then rolls it back by
// pinning the revision before it.
func (d *demo) showRollout(ctx context.Context, hubClient client.Client, memberClients []client.Client, members []*cluster, key client.ObjectKey, cm *corev1.ConfigMap) error {
	p := &fleetv1alpha1.Propagation{}
	edit := func(what string, change func(p *fleetv1alpha1.Propagation)) error {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := hubClient.Get(ctx, key, p); err != nil {
				return err
			}
			change(p)
			return hubClient.Update(ctx, p)
		})
		if err != nil {
			return fmt.Errorf("%s Propagation %s: %w", what, key, err)
		}
		return nil
	}
	rolledOut := func(n int64) func(ctx context.Context) bool {
		return func(ctx context.Context) bool {
			r := p.Status.Rollout
			return hubClient.Get(ctx, key, p) == nil && p.Status.ObservedGeneration == p.Generation && r != nil && r.Revision == n && r.Phase == fleetv1alpha1.RolloutComplete
		}
	}
	if err := edit("making progressive", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{Type: fleetv1alpha1.RolloutProgressive, Progressive: &fleetv1alpha1.ProgressiveRollout{
			MinSuccessTime: &metav1.Duration{Duration: 3 * time.Second},
		}}
	}); err != nil {
		return err
	}
	if err := d.waitFor(ctx, "the rollout of "+key.String(), func(ctx context.Context) bool {
		return hubClient.Get(ctx, key, p) == nil && p.Status.Rollout != nil && rolledOut(p.Status.Revision)(ctx)
	}); err != nil {
		return err
	}
	before := p.Status.Revision
	if err := setColor(ctx, hubClient, cm, "green"); err != nil {
		return err
	}
	d.say("made Propagation %s Progressive (a member at a time, each Available 3s before the next) and set color=\"green\" on the hub: revision %d", key, before+1)
	green := func(c *corev1.ConfigMap) bool { return c != nil && c.Data["color"] == "green" }
	blue := func(c *corev1.ConfigMap) bool { return c != nil && c.Data["color"] == "blue" }
	if err := d.waitFor(ctx, "the first member's revision", func(ctx context.Context) bool {
		return d.everyCopy(ctx, memberClients[:1], key, green) && d.everyCopy(ctx, memberClients[1:], key, blue)
	}); err != nil {
		return err
	}
	d.say("rolling out: %s has color=\"green\", %s waits with \"blue\"", members[0].name, members[1].name)
	if err := d.waitFor(ctx, "the rollout of revision", rolledOut(before+1)); err != nil {
		return err
	}
	d.say("rolled out: revision %d is in every member (fleet-manager rollout status propagation/%s -n %s waits for this)", before+1, key.Name, key.Namespace)
	if err := edit("rolling back", func(p *fleetv1alpha1.Propagation) { p.Spec.Revision = &before }); err != nil {
		return err
	}
	// A pin behind a newer revision is Pinned once it is everywhere, not
	// Complete: the newest revision is not rolled out.
	pinnedEverywhere := func(ctx context.Context) bool {
		r := p.Status.Rollout
		return hubClient.Get(ctx, key, p) == nil && p.Status.ObservedGeneration == p.Generation && r != nil && r.Revision == before && r.Phase == fleetv1alpha1.RolloutPinned
	}
	if err := d.waitFor(ctx, "the rollback", func(ctx context.Context) bool {
		return pinnedEverywhere(ctx) && d.everyCopy(ctx, memberClients, key, blue)
	}); err != nil {
		return err
	}
	d.say("rolled back: spec.revision pins revision %d, and every member has color=\"blue\" again (fleet-manager rollout undo does this)", before)
	// The hub gets the color the members have back, and the newest
	// revision is rolled out again, all at once.
	if err := setColor(ctx, hubClient, cm, "blue"); err != nil {
		return err
	}
	return edit("unpinning", func(p *fleetv1alpha1.Propagation) {
		p.Spec.Revision = nil
		p.Spec.Strategy = fleetv1alpha1.RolloutStrategy{}
	})
}

// setColor sets the hub ConfigMap cm's color.
func setColor(ctx context.Context, hubClient client.Client, cm *corev1.ConfigMap, color string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := hubClient.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			return err
		}
		cm.Data["color"] = color
		return hubClient.Update(ctx, cm)
	})
	if err != nil {
		return fmt.Errorf("changing ConfigMap %s on the hub: %w", client.ObjectKeyFromObject(cm), err)
	}
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
