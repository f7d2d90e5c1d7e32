// Package metrics is how every Prometheus collector of the project is
// registered (Register), so that several managers in one process share
// their series instead of failing, and how a result is counted
// (CountResult).
package metrics
