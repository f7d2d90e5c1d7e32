package propagation

import (
	"encoding/json"
	"fmt"
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

// TestMirrorOverItsBudgetKeepsWhatOnlyItHolds: a mirror ConfigMap whose
// entries would pass its byte budget keeps, within it, what only the
// mirror holds (another replica's, not merged yet), then the registered
// members' newest removals the journal holds; it cuts departed members'
// first, and says how many it cut.
func TestMirrorOverItsBudgetKeepsWhatOnlyItHolds(t *testing.T) {
	now := time.Date(2026, 1, 8, 0, 0, 0, 0, time.UTC)
	removals := func(n int) []mirroredRemoval {
		var owed []mirroredRemoval
		for i := range n {
			owed = append(owed, mirroredRemoval{Namespace: "team", Propagation: fmt.Sprintf("p-%03d", i), Reason: "the member is Unhealthy", Since: now.Add(time.Duration(i) * time.Minute)})
		}
		return owed
	}
	left := now.Add(-time.Hour)
	members := map[string]mirroredMember{
		"down":    {Owed: removals(100)},
		"gone":    {Owed: removals(100), Departed: &left},
		"handoff": {Owed: removals(3)[:1]}, // another replica's: the journal lacks it
	}
	held := func(member string, _ mirroredRemoval) bool { return member != "handoff" }
	all, _ := json.Marshal(members)
	budget := len(all) / 3

	kept, cut, err := fitMirror(members, budget, held)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(kept)
	if len(data) > budget {
		t.Errorf("the mirror holds %d bytes, over its budget of %d", len(data), budget)
	}
	if len(kept["handoff"].Owed) != 1 {
		t.Error("the removal only the mirror holds was cut")
	}
	if n := len(kept["gone"].Owed); n != 0 {
		t.Errorf("%d removals of a departed member kept while a registered member's were cut", n)
	}
	down := kept["down"].Owed
	if len(down) == 0 || len(down) == 100 {
		t.Fatalf("%d of the registered member's 100 removals kept, want some", len(down))
	}
	for _, o := range down {
		if o.Since.Before(now.Add(time.Duration(100-len(down)) * time.Minute)) {
			t.Errorf("an old removal (%s) kept while newer ones were cut", o.Propagation)
		}
	}
	if want := 201 - 1 - len(down); cut != want {
		t.Errorf("%d removals cut, want %d", cut, want)
	}
	if kept, cut, _ := fitMirror(members, len(all), held); cut != 0 || len(kept) != 3 {
		t.Errorf("a mirror within its budget: %d cut, %d members kept; want all", cut, len(kept))
	}
}
