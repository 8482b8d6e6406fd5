// Package regions replicates a region's admissions to its peer regions
// (docs/regions.md). The engine decides on the region's own Redis and
// hands each admission and give-back to a Replicator, which sends them in
// batches to every peer's Redis, idempotently, and removes an admission's
// copy from the region's count key once every peer has acknowledged it. No
// request waits on a peer.
package regions

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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
	// Block makes the change a block: Key is a block key (see Blocks in
	// lua/multi_window.lua) and Stamp the time its block ends, by the
	// deciding region's clock. The peer's block key then holds Stamp
	// unless it holds a later end, and the block started Keep (its
	// length, µs) before Stamp; Member is unused.
	Block bool
	// Reset makes the change a reset (docs/regions.md, Reset across
	// regions): Stamp is its floor, the deciding region's clock when it
	// cleared Key. The peer drops Key's entries stamped at or before the
	// floor, and their copies, and keeps the floor for Keep (the key's
	// longest window) so that such an entry arriving later is dropped
	// too. With Block, Key is a block key: a block that started at or
	// before the floor is lifted, and one arriving later is dropped, for
	// Keep (the block's length). Member is unused.
	Reset bool
}

// Invalidation returns the command (a PUBLISH) that makes a region's
// processes forget what they cached of count keys: the replicator sends
// it to a peer with the resets it applies there.
type Invalidation func(keys []string) []any

// SetKey is the key, after the engine's prefix, where each process of a
// region writes the hash of its region set (see CheckSet).
const SetKey = "{regions}:set"

// setTTL is how long a region set's hash stays: processes started within
// it are compared.
const setTTL = 24 * time.Hour

// SetHash returns a short hash of the region set: local's peers and local,
// ordered by name. Every process of one region computes the same.
func SetHash(local string, peers []string) string {
	names := append(slices.Clone(peers), local)
	slices.Sort(names)
	h := sha256.Sum256([]byte(strings.Join(names, "\x00") + "\x00" + local))
	return hex.EncodeToString(h[:8])
}

// CheckSet writes hash to key on the region's Redis and logs an error,
// once, when another process of the region wrote a different one within
// a day: processes that disagree on the region set break the share rule.
// It waits at most timeout; a Redis that does not answer is not checked.
func CheckSet(c Client, key, hash string, timeout time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	pipe := c.Pipeline()
	old := pipe.SetArgs(ctx, key, hash, redis.SetArgs{Get: true, TTL: setTTL})
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return
	}
	if prev := old.Val(); prev != "" && prev != hash {
		log.Error("regions: another process of this region runs a different set of regions (names, or this region's own name); every process of a region must name the same regions",
			"key", key)
	}
}
