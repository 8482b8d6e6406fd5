// Package regions replicates a region's admissions to its peer regions
// (docs/regions.md). The engine decides on the region's own Redis and
// hands each admission and give-back to a Replicator, which sends them in
// batches to every peer's Redis, idempotently, and removes an admission
// from the region's unstable key once every peer has acknowledged it. No
// request waits on a peer.
package regions

import (
	"cmp"
	"slices"
)

// Share returns region r's share of a headroom h among n regions:
// floor((max(h, 0) + r) / n). By Hermite's identity the shares of the n
// regions sum to max(h, 0). n must be positive and r in 0..n-1.
func Share(h, r, n int64) int64 {
	return (max(h, 0) + r) / n
}

// Index returns local's index among local and peers ordered by name, and
// the number of regions: the share rule's r and R.
func Index(local string, peers []string) (r, n int64) {
	names := append(slices.Clone(peers), local)
	slices.SortFunc(names, cmp.Compare[string])
	i, _ := slices.BinarySearch(names, local)
	return int64(i), int64(len(names))
}

// Entry is one change to replicate. Its zero value is not useful.
type Entry struct {
	// Key is the count key the change is in, the same name in every
	// region.
	Key string
	// Member is the entry's member, suffix included.
	Member string
	// Stamp is the entry's score: the decision time in µs since 1970, by
	// the deciding region's Redis clock.
	Stamp int64
	// Keep is how long the entry must stay in the peer's key (µs): the
	// longest window of the key's rules.
	Keep int64
	// Remove makes the change a give-back: the member leaves the peer's
	// key (ZREM).
	Remove bool
}
