//go:build race

package main

// raceEnabled: the test binary is built with -race.
const raceEnabled = true
