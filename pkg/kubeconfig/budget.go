package kubeconfig

import (
	"context"

	"golang.org/x/sync/semaphore"
)

// ReasonKubeconfigTooComplex refuses a kubeconfig with more structure than
// MaxKubeconfigElements, before it is decoded.
const ReasonKubeconfigTooComplex = "KubeconfigTooComplex"

// MaxKubeconfigElements bounds the structure of a kubeconfig: its lines,
// list items and flow separators, which together bound the nodes a decoder
// would build. Real kubeconfigs have a few hundred; decoding a flat
// mapping of 84,000 keys (1 MB) took hundreds of megabytes.
const MaxKubeconfigElements = 10_000

// structural marks the bytes that can start a new YAML or JSON node: line
// breaks (also CR, and the last byte of NEL, LS and PS, which YAML takes
// for line breaks), flow separators and openers, and block sequence
// entries. Bytes that are not structure, such as the base64 of
// certificates, count for nothing.
var structural = func() (t [256]bool) {
	for _, b := range []byte{'\n', '\r', ',', '[', '{', '-', 0x85, 0xa8, 0xa9} {
		t[b] = true
	}
	return t
}()

// CheckBudget refuses data, a kubeconfig or another document named what,
// if it is over MaxKubeconfigBytes or has more than MaxKubeconfigElements
// structural elements. It scans the bytes once and allocates nothing
// unless it refuses, so it can run before anything is decoded.
func CheckBudget(what string, data []byte) error {
	if len(data) > MaxKubeconfigBytes {
		return Refuse("KubeconfigTooLarge", "%s is %d bytes, the limit is %d", what, len(data), MaxKubeconfigBytes)
	}
	elements := 0
	for _, b := range data {
		if structural[b] {
			elements++
		}
	}
	if elements > MaxKubeconfigElements {
		return Refuse(ReasonKubeconfigTooComplex, "%s has more than %d lines, list items and separators; real ones have a few hundred",
			what, MaxKubeconfigElements)
	}
	return nil
}

// maxParsingBytes bounds the input being decoded at once, across every
// Policy: decoding takes several times the input in memory, so parses are
// weighed by input size (at least minParseWeight each), and a big input
// waits for others to end rather than add to the peak.
const (
	maxParsingBytes = 4 << 20
	minParseWeight  = 4 << 10
)

var parsing = semaphore.NewWeighted(maxParsingBytes)

// acquireParse waits until data may be decoded and returns the release.
// It cannot fail: every holder decodes one bounded input and releases.
func acquireParse(data []byte) (release func()) {
	weight := int64(max(len(data), minParseWeight))
	_ = parsing.Acquire(context.Background(), weight)
	return func() { parsing.Release(weight) }
}
