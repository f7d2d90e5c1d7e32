package registry_test

import (
	"context"
	"slices"
	"testing"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fleetkube/fleet-manager/internal/poll"
	"github.com/fleetkube/fleet-manager/pkg/registry"
)

// drain returns the names queued in q, sorted, and marks them done.
func drain(q workqueue.TypedRateLimitingInterface[reconcile.Request]) []string {
	var names []string
	for q.Len() > 0 {
		r, _ := q.Get()
		names = append(names, r.Name)
		q.Done(r)
	}
	slices.Sort(names)
	return names
}

// TestFactsWakeOnlyOnChange: a reader that starts late is given every
// cluster with a fact; after that, only changes wake it, and nothing once
// its source stopped.
func TestFactsWakeOnlyOnChange(t *testing.T) {
	facts := registry.NewFacts(func(a, b int) bool { return a == b })
	facts.Publish("east", 1)
	facts.Publish("west", 2)

	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx, stop := context.WithCancel(t.Context())
	if err := facts.Source().Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	if got := drain(q); !slices.Equal(got, []string{"east", "west"}) {
		t.Fatalf("a late reader was given %v, want east and west", got)
	}

	facts.Publish("east", 1) // unchanged
	if got := drain(q); len(got) != 0 {
		t.Errorf("an unchanged fact woke the reader for %v", got)
	}
	facts.Publish("east", 3)
	facts.Forget("west")
	facts.Forget("north") // never published
	if got := drain(q); !slices.Equal(got, []string{"east", "west"}) {
		t.Errorf("a change and a removal woke the reader for %v, want east and west", got)
	}
	if v, ok := facts.Get("east"); !ok || v != 3 {
		t.Errorf("east = %d, %t; want 3, true", v, ok)
	}
	if _, ok := facts.Get("west"); ok {
		t.Error("west's fact is still there after Forget")
	}

	stop()
	// The source lets go of the queue soon after its context ends.
	v := 10
	poll.Until(t, "the stopped reader is woken no more", func() bool {
		v++
		facts.Publish("east", v)
		return len(drain(q)) == 0
	})
}
