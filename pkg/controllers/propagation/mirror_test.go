package propagation

import (
	"testing"
	"time"
)

// TestMirrorForgetsOnlyMembersWhoseRegistrationIsGone: the mirror's
// entries of members without a registration are stamped gone, and go
// after forgetAfter; a registered member's entry stays however long it
// is down.
func TestMirrorForgetsOnlyMembersWhoseRegistrationIsGone(t *testing.T) {
	now := time.Date(2026, 1, 8, 0, 0, 0, 0, time.UTC)
	longAgo, lately := now.Add(-8*24*time.Hour), now.Add(-time.Hour)
	owed := []mirroredRemoval{{Namespace: "team", Propagation: "web"}}
	mirrored := map[string]mirroredMember{
		"down":         {Owed: owed, Departed: &longAgo}, // registered again, down since
		"gone-long":    {Owed: owed, Departed: &longAgo},
		"gone-lately":  {Owed: owed, Departed: &lately},
		"gone-unknown": {Owed: owed},
	}
	registered := func(member string) bool { return member == "down" }
	ageDeparted(mirrored, registered, now, 7*24*time.Hour)
	if _, ok := mirrored["down"]; !ok {
		t.Error("the entry of a registered member, only down, is gone")
	}
	if _, ok := mirrored["gone-long"]; ok {
		t.Error("the entry of a member gone for longer than forgetAfter stays: the shard only grows")
	}
	if m, ok := mirrored["gone-lately"]; !ok || !m.Departed.Equal(lately) {
		t.Errorf("the entry of a member gone lately: %+v, %v; want kept, since when it left", m, ok)
	}
	if m, ok := mirrored["gone-unknown"]; !ok || m.Departed == nil || !m.Departed.Equal(now) {
		t.Errorf("the entry of a member gone since unknown: %+v; want kept, stamped gone now", m)
	}
}
