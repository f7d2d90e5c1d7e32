package shard

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// TestOwnLeaseProof checks what proves that a replica holds its Lease: a
// renewal of this process that the cache showed, counted from when it was
// sent; and when the cache lags: a write that succeeded and has not shown
// within the renew deadline.
func TestOwnLeaseProof(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	o := &ownLease{clock: clk, holder: "replica-a_1", deadline: 10 * time.Second, sent: map[int64]time.Time{}}
	cached := func(holder string, renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}, Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(holder), RenewTime: &metav1.MicroTime{Time: renewed},
		}}
	}
	// A write sent at t0 that succeeded, answered 3 s late.
	t0 := clk.Now()
	o.sent[t0.UnixMicro()] = t0
	clk.SetTime(t0.Add(3 * time.Second))
	o.wrote(&coordinationv1.Lease{}, marks{}, t0)

	if _, _, confirmed := o.state(); !confirmed.IsZero() {
		t.Fatalf("confirmed %s before the cache showed anything", confirmed)
	}
	// Another process's Lease of the same name proves nothing.
	o.confirm(cached("replica-a_2", t0), clk.Now())
	if _, _, confirmed := o.state(); !confirmed.IsZero() {
		t.Errorf("another holder's renewal confirmed %s", confirmed)
	}
	o.confirm(cached("replica-a_1", t0), clk.Now())
	if _, _, confirmed := o.state(); !confirmed.Equal(t0) {
		t.Errorf("confirmed %s, want the send time %s, not when the answer came", confirmed, t0)
	}
	if o.lagging(clk.Now()) {
		t.Error("lagging, though the cache showed the last write")
	}

	// The next write succeeds, and the cache never shows it.
	t1 := clk.Now()
	o.sent[t1.UnixMicro()] = t1
	o.wrote(&coordinationv1.Lease{}, marks{}, t1)
	clk.SetTime(t1.Add(9 * time.Second))
	if o.lagging(clk.Now()) {
		t.Error("lagging before the renew deadline passed")
	}
	clk.SetTime(t1.Add(10 * time.Second))
	if !o.lagging(clk.Now()) {
		t.Error("not lagging, though a write that succeeded has not shown for the renew deadline")
	}
	// Once the cache shows it, the replica may renew again.
	o.confirm(cached("replica-a_1", t1), clk.Now())
	if o.lagging(clk.Now()) {
		t.Error("still lagging once the cache showed the write")
	}
}
