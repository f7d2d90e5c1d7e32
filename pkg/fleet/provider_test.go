package fleet

import (
	"testing"
	"time"
)

// TestLockNameHoldsOneNameOnly checks that a name's settle lock holds up
// settles of that name and no other, and is forgotten once released.
func TestLockNameHoldsOneNameOnly(t *testing.T) {
	p := &provider{settling: map[string]*nameLock{}}
	unlockA := p.lockName("a")

	otherName := make(chan struct{})
	go func() {
		p.lockName("b")()
		close(otherName)
	}()
	select {
	case <-otherName:
	case <-time.After(10 * time.Second):
		t.Fatal("settling b waited for a")
	}

	sameName := make(chan struct{})
	go func() {
		unlock := p.lockName("a")
		close(sameName)
		unlock()
	}()
	select {
	case <-sameName:
		t.Fatal("a was locked twice at once")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	<-sameName

	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		n := len(p.settling)
		p.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d released settle locks are still held in the map", n)
		}
		time.Sleep(time.Millisecond)
	}
}
