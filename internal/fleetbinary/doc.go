// Package fleetbinary builds the fleet-manager binary for the tests that
// run it as a user does (and other programs they run, such as credential
// plugins, as the tests themselves are built), and runs its processes: each writes its output
// to a log file, is stopped with SIGTERM or killed with SIGKILL, and is
// checked for what a healthy process never writes (a panic, a data race,
// a fatal error). Whoever starts a Process ends it; nothing here outlives
// its caller.
package fleetbinary
