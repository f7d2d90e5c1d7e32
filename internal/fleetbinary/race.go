//go:build race

package fleetbinary

// raceEnabled: this binary is built with -race, and so is the manager.
const raceEnabled = true
