package regions

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestApplyReset checks on miniredis and a real redis-server what a reset
// does to a peer's count key: its entries and copies stamped at or
// before the floor leave, later ones and the markers stay, the key keeps
// the floor ('f'), an entry at or before it that arrives later (alone or
// in the reset's batch) is dropped and one after it is added, and the same
// reset again, or an earlier one, changes nothing.
func TestApplyReset(t *testing.T) {
	mini := func() *redis.Client { _, c := redistest.Mini(t); return c }
	real := func() *redis.Client { _, c := redistest.StartClient(t); return c }
	for _, start := range []func() *redis.Client{mini, real} {
		applyReset(t, start())
	}
}

func applyReset(t *testing.T, us *redis.Client) {
	ctx := context.Background()
	now := time.Now().UnixMicro()
	minute := int64(time.Minute / time.Microsecond)
	us.ZAdd(ctx, "k",
		redis.Z{Score: float64(now - 3), Member: "m1"},
		redis.Z{Score: float64(now - 1), Member: "m2"}, redis.Z{Score: copyScore(now - 1), Member: CopyPrefix + "m2"},
		redis.Z{Score: float64(now + 2), Member: "m3"}, redis.Z{Score: copyScore(now + 2), Member: CopyPrefix + "m3"},
		redis.Z{Score: -float64(minute), Member: "r"})
	us.PExpire(ctx, "k", 2*time.Minute)
	reset := func(key string, floor int64) *pending {
		return &pending{Entry: Entry{Key: key, Stamp: floor, Keep: minute, Reset: true}}
	}
	add := func(key, m string, stamp int64) *pending {
		return &pending{Entry: Entry{Key: key, Member: m, Stamp: stamp, Keep: minute}}
	}
	members := func(key string) []string {
		m := slices.DeleteFunc(us.ZRange(ctx, key, 0, -1).Val(), isEpochMarker)
		slices.Sort(m)
		return m
	}
	want := []string{"f", "m3", "r", "um3"}
	for _, b := range [][]*pending{{reset("k", now)}, {reset("k", now)}, {reset("k", now-10)}} {
		if _, err := apply(ctx, us, b, 0, "", nil); err != nil {
			t.Fatal(err)
		}
		if got := members("k"); !slices.Equal(got, want) {
			t.Fatalf("after the reset the peer's key holds %v, want %v", got, want)
		}
		if f := us.ZScore(ctx, "k", "f").Val(); f != -float64(now) {
			t.Fatalf("the key's floor is %v, want %d", f, -now)
		}
	}
	if ttl := us.PTTL(ctx, "k").Val(); ttl < time.Minute {
		t.Errorf("the reset shortened the key's expiry to %v", ttl)
	}
	// Late entries: at or before the floor dropped, after it added.
	if _, err := apply(ctx, us, []*pending{add("k", "late", now), add("k", "after", now+5)}, 0, "", nil); err != nil {
		t.Fatal(err)
	}
	if got, want := members("k"), []string{"after", "f", "m3", "r", "um3"}; !slices.Equal(got, want) {
		t.Errorf("after late entries the key holds %v, want %v", got, want)
	}
	// A key the peer lacks, its reset in the batch of entries around it.
	b := []*pending{add("k2", "before", now-1), reset("k2", now), add("k2", "after", now+1)}
	if _, err := apply(ctx, us, b, 0, "", nil); err != nil {
		t.Fatal(err)
	}
	if got, want := members("k2"), []string{"after", "f"}; !slices.Equal(got, want) {
		t.Errorf("a batch around a reset left %v, want %v", got, want)
	}
	if ttl := us.PTTL(ctx, "k2").Val(); ttl <= 0 || ttl > time.Minute+time.Minute/8+2*time.Second {
		t.Errorf("the key made for a reset expires in %v, want at most its window, its epoch (an eighth) and a second", ttl)
	}
}

// TestApplyResetBlock checks what a reset does to a peer's block key: a
// block that started at or before the floor is lifted and one arriving
// later is dropped, while one that started after the floor stands,
// held or arriving; the same reset again changes nothing.
func TestApplyResetBlock(t *testing.T) {
	mini := func() *redis.Client { _, c := redistest.Mini(t); return c }
	real := func() *redis.Client { _, c := redistest.StartClient(t); return c }
	for _, start := range []func() *redis.Client{mini, real} {
		applyResetBlock(t, start())
	}
}

func applyResetBlock(t *testing.T, us *redis.Client) {
	ctx := context.Background()
	now := time.Now().UnixMicro()
	minute := int64(time.Minute / time.Microsecond)
	block := func(key string, since int64) *pending {
		return &pending{Entry: Entry{Key: key, Stamp: since + minute, Keep: minute, Block: true}}
	}
	reset := func(key string, floor int64) *pending {
		return &pending{Entry: Entry{Key: key, Stamp: floor, Keep: minute, Reset: true, Block: true}}
	}
	held := func(key string) int64 { v, _ := us.Get(ctx, key).Int64(); return v }
	steps := []struct {
		batch []*pending
		want  int64
	}{
		{[]*pending{block("b", now-1000)}, now - 1000 + minute},
		{[]*pending{reset("b", now)}, -now},                     // lifted
		{[]*pending{reset("b", now)}, -now},                     // replayed
		{[]*pending{block("b", now-500)}, -now},                 // started before the floor
		{[]*pending{block("b", now+1000)}, now + 1000 + minute}, // after it
		{[]*pending{reset("b", now+10)}, now + 1000 + minute},   // a block after a later floor stands
	}
	for i, s := range steps {
		if _, err := apply(ctx, us, s.batch, 0, "", nil); err != nil {
			t.Fatal(err)
		}
		if got := held("b"); got != s.want {
			t.Fatalf("step %d: the block key holds %d, want %d", i, got, s.want)
		}
	}
	if ttl := us.PTTL(ctx, "b").Val(); ttl <= 0 || ttl > time.Minute+2*time.Second {
		t.Errorf("the block key expires in %v, want at most the block's length", ttl)
	}
}

// TestResetLocal checks the deciding region's reset on miniredis and a
// real redis-server: the count key keeps only its floor, for the longer
// of the window and its retention, the block key holds -floor for the
// block's length (or is deleted without one), and the floor is the
// server's clock.
func TestResetLocal(t *testing.T) {
	mini := func() *redis.Client { s, c := redistest.Mini(t); s.SetTime(time.Now()); return c }
	real := func() *redis.Client { _, c := redistest.StartClient(t); return c }
	for _, start := range []func() *redis.Client{mini, real} {
		resetLocal(t, start())
	}
}

func resetLocal(t *testing.T, c *redis.Client) {
	ctx := context.Background()
	now := time.Now().UnixMicro()
	minute := int64(time.Minute / time.Microsecond)
	c.ZAdd(ctx, "k", redis.Z{Score: float64(now), Member: "m1"}, redis.Z{Score: copyScore(now), Member: CopyPrefix + "m1"},
		redis.Z{Score: -float64(2 * minute), Member: "r"})
	c.Set(ctx, "k:block", now+minute, time.Minute)
	floor, err := Reset(ctx, c, "k", "k:block", minute, minute/2)
	if err != nil {
		t.Fatal(err)
	}
	if d := floor - now; d < -5_000_000 || d > 5_000_000 {
		t.Errorf("floor %d, %d µs from the test's clock", floor, d)
	}
	if m := c.ZRangeWithScores(ctx, "k", 0, -1).Val(); len(m) != 1 || m[0].Member != "f" || m[0].Score != -float64(floor) {
		t.Errorf("the reset key holds %v, want only f at %d", m, -floor)
	}
	if ttl := c.PTTL(ctx, "k").Val(); ttl < 115*time.Second || ttl > 2*time.Minute {
		t.Errorf("the reset key expires in %v, want its retention (2m)", ttl)
	}
	if v, _ := c.Get(ctx, "k:block").Int64(); v != -floor {
		t.Errorf("the block key holds %d, want %d", v, -floor)
	}
	if ttl := c.PTTL(ctx, "k:block").Val(); ttl < 25*time.Second || ttl > 30*time.Second {
		t.Errorf("the block key expires in %v, want the block's 30s", ttl)
	}
	c.Set(ctx, "k2:block", now+minute, time.Minute)
	if _, err := Reset(ctx, c, "k2", "k2:block", minute, 0); err != nil {
		t.Fatal(err)
	}
	if c.Exists(ctx, "k2:block").Val() != 0 {
		t.Error("without a block length the block key stays")
	}
}

// TestResetInvalidates checks that the replicator sends a peer the
// invalidation of the count keys a batch resets, once, after them, and
// none for a batch without resets.
func TestResetInvalidates(t *testing.T) {
	_, us := redistest.Mini(t)
	ctx := context.Background()
	sub := us.Subscribe(ctx, "inval")
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	inval := func(keys []string) []any { return []any{"publish", "inval", strings.Join(keys, " ")} }
	r := New(Config{Peers: map[string]Client{"us": us}, Invalidate: inval})
	defer r.Close()
	now := time.Now().UnixMicro()
	r.Add(Entry{Key: "a", Member: "m", Stamp: now, Keep: 60_000_000})
	// The script loaded: a batch sent again in full after NOSCRIPT sends
	// its invalidation again (harmless, but not what this counts).
	redistest.Eventually(t, "the admission applied", func() bool { return entries(us, "a") == 1 })
	r.Add(Entry{Key: "k", Stamp: now, Keep: 60_000_000, Reset: true})
	r.Add(Entry{Key: "k:block", Stamp: now, Keep: 60_000_000, Reset: true, Block: true})
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Payload != "k" {
		t.Errorf("invalidation %q, want %q", msg.Payload, "k")
	}
	r.Add(Entry{Key: "a", Member: "m2", Stamp: now, Keep: 60_000_000})
	redistest.Eventually(t, "the admission applied", func() bool { return entries(us, "a") == 2 })
	wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if m, err := sub.ReceiveMessage(wait); err == nil {
		t.Errorf("a batch without resets sent %q", m.Payload)
	}
}
