package shard

import (
	"fmt"
	"testing"
)

// TestOwnerMovesOnlyWithItsReplica: of 3,000 names over three replicas,
// each replica owns about a third; a fourth that joins takes about a
// quarter, all from the others, and none moves between them; one that
// leaves gives only its own away.
func TestOwnerMovesOnlyWithItsReplica(t *testing.T) {
	three := []string{"replica-a", "replica-b", "replica-c"}
	four := append([]string{"replica-d"}, three...)
	two := []string{"replica-a", "replica-c"}
	const n = 3000
	owned := map[string]int{}
	joined, left := 0, 0
	for i := range n {
		name := fmt.Sprintf("member-%04d", i)
		before := ownerOf(name, three)
		owned[before]++
		if after := ownerOf(name, four); after != before {
			joined++
			if after != "replica-d" {
				t.Errorf("%s moved from %s to %s when replica-d joined", name, before, after)
			}
		}
		if after := ownerOf(name, two); after != before {
			left++
			if before != "replica-b" {
				t.Errorf("%s moved from %s to %s when replica-b left", name, before, after)
			}
		}
	}
	for _, r := range three {
		if share := float64(owned[r]) / n; share < 0.30 || share > 0.37 {
			t.Errorf("%s owns %.1f%% of the names, want about a third", r, 100*share)
		}
	}
	if share := float64(joined) / n; share < 0.22 || share > 0.28 {
		t.Errorf("a fourth replica took %.1f%% of the names, want about a quarter", 100*share)
	}
	if left != owned["replica-b"] {
		t.Errorf("%d names moved when replica-b left, which owned %d", left, owned["replica-b"])
	}
	if ownerOf("member-0000", nil) != "" {
		t.Error("a name has an owner among no replicas")
	}
}
