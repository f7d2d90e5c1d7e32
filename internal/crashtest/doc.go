// Package crashtest holds the crash-consistency suite of the journal: a
// fleet-manager process is SIGKILLed at seeded random points while it
// propagates objects and while it deletes them, with a member down, and
// the fleet must converge after each restart. It has no code outside its
// tests.
package crashtest
