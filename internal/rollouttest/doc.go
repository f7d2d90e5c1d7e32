// Package rollouttest tests Propagation rollouts end to end: revisions
// given to members in order, a few at a time and gated on availability,
// stopped on failures, paused, rolled back, and members cordoned and
// drained. Its tests need more members than any other package, each an
// API server of its own, so that members at different revisions never
// share an object; they run one after another, each with its own fleet,
// member names and team namespace, on one hub.
//
// It holds tests only.
package rollouttest
