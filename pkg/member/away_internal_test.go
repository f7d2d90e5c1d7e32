package member

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
)

// TestInformerCallsWaitForTheMembersReturn: while the member is away, an
// informer's list and watch send nothing and wait, busy, until it is
// back or their context ends (then they fail, leaving nothing running);
// an informer whose watch was stopped and that is in no call is idle.
func TestInformerCallsWaitForTheMembersReturn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // after cancel: nothing left waiting
	back := make(chan struct{})
	away := back
	syncs := newInitialSyncs(1, time.Hour).forMember(func() <-chan struct{} { return away })
	sent := make(chan string, 10)
	lw := &toolscache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			sent <- "list"
			return &metav1.List{}, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) {
			sent <- "watch"
			return watch.NewFake(), nil
		},
	}
	syncs.newInformer(lw, &metav1.PartialObjectMetadata{}, 0, toolscache.Indexers{})
	g := syncs.informers[0]
	if !syncs.idle() {
		t.Fatal("an informer in no call and not watching is not idle")
	}

	ctx, cancel := context.WithCancel(t.Context())
	ended := make(chan error)
	go func() {
		_, err := g.ListWithContext(ctx, metav1.ListOptions{})
		ended <- err
	}()
	for syncs.held.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if syncs.idle() {
		t.Error("an informer waiting in a held call is idle")
	}
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("a held list whose context ended returned %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	watched := make(chan watch.Interface)
	go func() {
		w, err := g.WatchWithContext(ctx, metav1.ListOptions{})
		if err != nil {
			t.Error(err)
		}
		watched <- w
	}()
	for syncs.held.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	select {
	case what := <-sent:
		t.Fatalf("a %s was sent while the member was away", what)
	default:
	}
	away = nil
	close(back) // the member is back
	w := <-watched
	if what := <-sent; what != "watch" {
		t.Fatalf("sent %s at the return, want the held watch", what)
	}
	if syncs.idle() {
		t.Error("a watching informer is idle")
	}
	w.Stop()
	w.Stop()
	if !syncs.idle() {
		t.Error("an informer whose watch stopped, in no call, is not idle")
	}
	cancel()
}
