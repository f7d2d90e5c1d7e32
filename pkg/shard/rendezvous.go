package shard

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
)

// ownerOf returns the replica of replicas that owns cluster name by
// rendezvous (highest random weight) hashing: the one whose hash of
// (replica, name) is highest. Every replica that sees the same replicas
// picks the same owner, and a replica joining or leaving moves only the
// names whose highest weight it has or had: about 1/N of them. "" if
// there is no replica.
func ownerOf(name string, replicas []string) string {
	var owner string
	var best uint64
	for _, r := range replicas {
		if w := weight(r, name); owner == "" || w > best || (w == best && r < owner) {
			owner, best = r, w
		}
	}
	return owner
}

// weight is FNV-1a of replica and name, separated by a byte no name
// holds, then mixed by SplitMix64's finalizer, so that names that differ
// in a few bytes get unrelated weights.
func weight(replica, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(replica))
	h.Write([]byte{0})
	h.Write([]byte(name))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// viewID names a set of replicas: replicas that agree on it agree on
// every cluster's owner.
func viewID(replicas []string) string {
	h := fnv.New64a()
	h.Write([]byte(strings.Join(slices.Sorted(slices.Values(replicas)), "\x00")))
	return fmt.Sprintf("%016x", h.Sum64())
}
