package member

// InitialSyncSlotsHeld is how many of p's initial-sync slots are taken
// now (for the tests of package member_test).
func InitialSyncSlotsHeld(p *Pool) int { return len(p.initialSyncs.slots) }

// TakeAllInitialSyncSlots takes every free initial-sync slot of p, as
// informers filling at once would, and returns what gives them back.
func TakeAllInitialSyncSlots(p *Pool) (giveBack func()) {
	taken := 0
	for len(p.initialSyncs.slots) < cap(p.initialSyncs.slots) {
		p.initialSyncs.slots <- struct{}{}
		taken++
	}
	return func() {
		for range taken {
			<-p.initialSyncs.slots
		}
	}
}

// InformerCallsHeld is how many list and watch calls of the named
// member's informers wait for its return (for the tests of package
// member_test).
func InformerCallsHeld(p *Pool, name string) int {
	p.mu.Lock()
	m := p.members[name]
	p.mu.Unlock()
	if m == nil {
		return 0
	}
	if conn := m.conn.Load(); conn != nil && conn.informers != nil {
		return int(conn.informers.held.Load())
	}
	return 0
}
