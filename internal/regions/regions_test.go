package regions

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestShareSplitsHeadroom checks the share arithmetic: the shares of R
// regions sum to the headroom (Hermite's identity), the first regions
// getting one less when R does not divide it, and a negative headroom
// gives nothing.
func TestShareSplitsHeadroom(t *testing.T) {
	for n := int64(1); n <= 7; n++ {
		for h := int64(-3); h <= 50; h++ {
			sum := int64(0)
			for r := range n {
				s := Share(h, r, n)
				if r > 0 && s < Share(h, r-1, n) {
					t.Fatalf("Share(%d, %d, %d) = %d below region %d's", h, r, n, s, r-1)
				}
				sum += s
			}
			if want := max(h, 0); sum != want {
				t.Fatalf("%d regions, headroom %d: shares sum to %d", n, h, sum)
			}
		}
	}
	if got := Share(100, 0, 3); got != 33 {
		t.Errorf("Share(100, 0, 3) = %d, want 33", got)
	}
	if got := Share(100, 2, 3); got != 34 {
		t.Errorf("Share(100, 2, 3) = %d, want 34", got)
	}
}

// TestIndex checks that regions are ordered by name.
func TestIndex(t *testing.T) {
	for _, tc := range []struct {
		local string
		peers []string
		r, n  int64
	}{
		{"eu", []string{"us", "ap"}, 1, 3},
		{"ap", []string{"us", "eu"}, 0, 3},
		{"us", []string{"eu", "ap"}, 2, 3},
		{"a", nil, 0, 1},
	} {
		if r, n := Index(tc.local, tc.peers); r != tc.r || n != tc.n {
			t.Errorf("Index(%q, %v) = %d, %d; want %d, %d", tc.local, tc.peers, r, n, tc.r, tc.n)
		}
	}
}

// TestReplicateAndStabilize checks on miniredis and real redis-servers
// that entries reach every peer, that the local unstable set loses them
// once both have, that a batch applied twice changes nothing, that a
// later batch trims entries older than the key's retention, that a
// give-back removes the member, and that Close leaves no goroutine.
// copyScore is the score of the copy of an admission at stamp (µs) in
// its count key: -(2^52 + stamp), as lua/multi_window.lua writes it.
func copyScore(stamp int64) float64 { return -float64(1<<52 + stamp) }

// entries counts the entries in key: its members scored above 0, not its
// markers or copies.
func entries(c *redis.Client, key string) int64 {
	return c.ZCount(context.Background(), key, "0", "+inf").Val()
}

// isEpochMarker reports whether member is a peer's epoch marker ('p' and
// the epoch's length, see applySrc).
func isEpochMarker(member string) bool {
	digits := strings.TrimPrefix(member, "p")
	return digits != member && digits != "" && strings.Trim(digits, "0123456789") == ""
}

// copies counts the copies in key.
func copies(c *redis.Client, key string) int64 {
	return c.ZCount(context.Background(), key, "-inf", "-4503599627370496").Val()
}

func TestReplicateAndStabilize(t *testing.T) {
	mini := func() *redis.Client { _, c := redistest.Mini(t); return c }
	real := func() *redis.Client { _, c := redistest.StartClient(t); return c }
	for _, start := range []func() *redis.Client{mini, real} {
		replicateAndStabilize(t, start(), start(), start())
	}
}

func replicateAndStabilize(t *testing.T, local, us, ap *redis.Client) {
	ctx := context.Background()
	now := time.Now().UnixMicro()
	for i, m := range []string{"m1", "m2"} {
		local.ZAdd(ctx, "k", redis.Z{Score: float64(now + int64(i)), Member: m}, redis.Z{Score: copyScore(now + int64(i)), Member: CopyPrefix + m})
	}
	r := New(Config{Local: local, Peers: map[string]Client{"us": us, "ap": ap}})
	r.Add(Entry{Key: "k", Member: "m1", Stamp: now, Keep: int64(time.Minute / time.Microsecond)})
	r.Add(Entry{Key: "k", Member: "m2", Stamp: now + 1, Keep: int64(time.Minute / time.Microsecond)})
	redistest.Eventually(t, "entries applied and stable", func() bool {
		return entries(us, "k") == 2 && entries(ap, "k") == 2 && copies(local, "k") == 0 && local.ZCard(ctx, "k").Val() == 2
	})
	if ttl := us.PTTL(ctx, "k").Val(); ttl <= 0 {
		t.Errorf("peer key PTTL %v, want > 0", ttl)
	}
	// The same batch again: nothing changes.
	p := &pending{Entry: Entry{Key: "k", Member: "m1", Stamp: now, Keep: int64(time.Minute / time.Microsecond)}}
	if _, err := apply(ctx, us, []*pending{p, p}, 0, "", nil); err != nil {
		t.Fatal(err)
	}
	if n := entries(us, "k"); n != 2 {
		t.Errorf("after a duplicate batch the peer holds %d entries, want 2", n)
	}
	if s := us.ZScore(ctx, "k", "m1").Val(); s != float64(now) {
		t.Errorf("m1's score %v, want %d", s, now)
	}
	// A later batch trims what left the key's retention.
	minute := int64(time.Minute / time.Microsecond)
	old := &pending{Entry: Entry{Key: "k2", Member: "old", Stamp: now - 2*minute, Keep: minute}}
	young := &pending{Entry: Entry{Key: "k2", Member: "young", Stamp: now, Keep: minute}}
	for _, b := range [][]*pending{{old}, {young}} {
		if _, err := apply(ctx, us, b, 0, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	if m := us.ZRangeByScore(ctx, "k2", &redis.ZRangeBy{Min: "0", Max: "+inf"}).Val(); len(m) != 1 || m[0] != "young" {
		t.Errorf("after a trim the peer's key holds %v, want [young]", m)
	}
	r.Add(Entry{Key: "k", Member: "m1", Remove: true})
	redistest.Eventually(t, "give-back applied", func() bool {
		return entries(us, "k") == 1 && entries(ap, "k") == 1
	})
	for _, s := range r.Stats() {
		if !s.Reachable || s.Queue != 0 || s.Lag != 0 {
			t.Errorf("stats %+v, want reachable, empty", s)
		}
	}
	r.Close()
	// Close has waited for them; one may still be returning from its
	// last deferred call.
	redistest.Eventually(t, "no goroutine left after Close", func() bool { return redistest.Goroutines("internal/regions.(*") == 0 })
}

// TestCutPeerHoldsOwnQueue checks that a peer that does not answer holds
// back only its own queue, shows in the stats, bounds its queue, and that
// Close gives up on it within about a second.
func TestCutPeerHoldsOwnQueue(t *testing.T) {
	ctx := context.Background()
	_, local := redistest.Mini(t)
	_, us := redistest.Mini(t)
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 20 * time.Millisecond})
	t.Cleanup(func() { dead.Close() })
	local.ZAdd(ctx, "k", redis.Z{Score: copyScore(1), Member: CopyPrefix + "m1"})
	r := New(Config{Local: local, Peers: map[string]Client{"us": us, "ap": dead}, Queue: 3})
	for i := range 5 {
		if i == 3 {
			// The live peer's queue holds 3 too: let it drain.
			redistest.Eventually(t, "the live peer's first entries", func() bool {
				return entries(us, "k") == 3 && r.Stats()[1].Queue == 0
			})
		}
		r.Add(Entry{Key: "k", Member: "m" + string(rune('1'+i)), Stamp: time.Now().UnixMicro(), Keep: 60_000_000})
	}
	redistest.Eventually(t, "the live peer has every entry", func() bool { return entries(us, "k") == 5 })
	redistest.Eventually(t, "the dead peer shows", func() bool {
		s := r.Stats()
		return s[0].Region == "ap" && !s[0].Reachable && s[0].Queue == 3 && s[0].Dropped == 2 && s[0].Lag > 0 &&
			s[1].Reachable && s[1].Queue == 0
	})
	if n := copies(local, "k"); n != 1 {
		t.Errorf("unstable entries %d, want 1: not stable without every peer", n)
	}
	start := time.Now()
	r.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v with a dead peer, want about 1 s at most", d)
	}
	// Close has waited for them; one may still be returning from its
	// last deferred call.
	redistest.Eventually(t, "no goroutine left after Close", func() bool { return redistest.Goroutines("internal/regions.(*") == 0 })
}

// TestCheckSetLogsDisagreement checks that a process whose region set
// differs from the one another process of its region wrote is logged at
// error level, and one that agrees is not.
func TestCheckSetLogsDisagreement(t *testing.T) {
	_, c := redistest.Mini(t)
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, nil))
	a := SetHash("eu", []string{"us", "ap"})
	if b := SetHash("eu", []string{"ap", "us"}); a != b {
		t.Fatalf("the hash depends on the peers' order: %s, %s", a, b)
	}
	CheckSet(c, "p{regions}:set", a, time.Second, log)
	CheckSet(c, "p{regions}:set", a, time.Second, log)
	if buf.Len() != 0 {
		t.Fatalf("agreeing processes logged: %s", buf.String())
	}
	CheckSet(c, "p{regions}:set", SetHash("eu", []string{"us"}), time.Second, log)
	if !strings.Contains(buf.String(), "level=ERROR") {
		t.Fatalf("a disagreeing process was not logged: %q", buf.String())
	}
	if ttl := c.PTTL(context.Background(), "p{regions}:set").Val(); ttl <= 0 {
		t.Errorf("the set's key PTTL %v, want > 0", ttl)
	}
}

// TestCloseLogsNoUnreachable checks that Close, cutting short a batch in
// flight to a peer that is slow to answer, logs nothing: the peer was not
// found unreachable, the replicator stopped.
func TestCloseLogsNoUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // accepted, never answered
		}
	}()
	silent := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { silent.Close() })
	var buf strings.Builder
	r := New(Config{Peers: map[string]Client{"us": silent}, Log: slog.New(slog.NewTextHandler(&buf, nil))})
	r.Add(Entry{Key: "k", Member: "m1", Stamp: time.Now().UnixMicro(), Keep: 60_000_000})
	time.Sleep(50 * time.Millisecond) // the batch is in flight
	r.Close()
	if buf.Len() != 0 {
		t.Errorf("Close logged: %s", buf.String())
	}
}

// TestApplyBlock checks a block's replication on a peer: the block key
// takes the end, expiring with it; the same entry again, or an earlier
// end, changes nothing; a later end extends it; an end already passed
// sets nothing; the replicator removes no copy for a block.
func TestApplyBlock(t *testing.T) {
	mini := func() *redis.Client { _, c := redistest.Mini(t); return c }
	real := func() *redis.Client { _, c := redistest.StartClient(t); return c }
	for _, start := range []func() *redis.Client{mini, real} {
		applyBlock(t, start(), start())
	}
}

func applyBlock(t *testing.T, local, us *redis.Client) {
	ctx := context.Background()
	now := time.Now().UnixMicro()
	minute := int64(time.Minute / time.Microsecond)
	block := func(key string, end int64) *pending { return &pending{Entry: Entry{Key: key, Stamp: end, Block: true}} }
	held := func(key string) int64 { v, _ := us.Get(ctx, key).Int64(); return v }
	if _, err := apply(ctx, us, []*pending{block("k:block", now+minute), block("k:block", now+minute)}, 0, "", nil); err != nil {
		t.Fatal(err)
	}
	if got := held("k:block"); got != now+minute {
		t.Fatalf("the peer's block key holds %d, want %d", got, now+minute)
	}
	if ttl := us.PTTL(ctx, "k:block").Val(); ttl < 55*time.Second || ttl > time.Minute+time.Second {
		t.Errorf("the peer's block expires in %v, want about a minute", ttl)
	}
	if _, err := apply(ctx, us, []*pending{block("k:block", now+minute/2)}, 0, "", nil); err != nil {
		t.Fatal(err)
	}
	if got := held("k:block"); got != now+minute {
		t.Errorf("an earlier end shortened the block to %d, want %d", got, now+minute)
	}
	if _, err := apply(ctx, us, []*pending{block("k:block", now+2*minute)}, 0, "", nil); err != nil {
		t.Fatal(err)
	}
	if got := held("k:block"); got != now+2*minute {
		t.Errorf("a later end: the block holds %d, want %d", got, now+2*minute)
	}
	if _, err := apply(ctx, us, []*pending{block("gone:block", now-minute)}, 0, "", nil); err != nil {
		t.Fatal(err)
	}
	if n := us.Exists(ctx, "gone:block").Val(); n != 0 {
		t.Error("a block already over was set")
	}
	// Through the replicator, beside an admission: the local keys keep
	// what they hold.
	local.Set(ctx, "r:block", "x", time.Minute)
	r := New(Config{Local: local, Peers: map[string]Client{"us": us}})
	r.Add(Entry{Key: "r", Member: "m1", Stamp: now, Keep: minute})
	r.Add(Entry{Key: "r:block", Stamp: now + minute, Block: true})
	redistest.Eventually(t, "the block and the admission applied", func() bool {
		return held("r:block") == now+minute && entries(us, "r") == 1
	})
	r.Close()
	if v := local.Get(ctx, "r:block").Val(); v != "x" {
		t.Errorf("the local block key holds %q, want it untouched", v)
	}
}
