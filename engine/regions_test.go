package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/plan"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// deadPeers returns peer clients of regions "ap" and "us" that never
// answer: nothing this region admits becomes stable.
func deadPeers(t *testing.T) map[string]Client {
	peers := map[string]Client{}
	for _, name := range []string{"ap", "us"} {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 20 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		peers[name] = c
	}
	return peers
}

// shareCase checks the share rule on the engine of client c, region "eu"
// (index 1 of ap, eu, us) with peers that never acknowledge: with p peer
// entries in a window of limit 10, it admits floor((10 - p + 1) / 3)
// requests, each reporting what the share leaves, then denies with no full
// window and no remaining in the binding window, and a wait of at most
// 250 ms, or the oldest entry's when only a departure makes room; each
// admission has a copy; a regional request is decided as without regions.
func shareCase(t *testing.T, c redis.UniversalClient, p int) {
	shareCaseWindows(t, c, p, win(10, time.Minute))
	// A second, shorter window with more room: the longer one binds.
	shareCaseWindows(t, c, p, win(10, time.Hour), win(50, time.Minute))
}

// shareCaseWindows is shareCase with the windows ws, the first of limit 10
// and binding.
func shareCaseWindows(t *testing.T, c redis.UniversalClient, p int, ws ...rules.Window) {
	ctx := context.Background()
	clk := redistest.NewClock()
	e := newEngine(t, c, WithClock(clk.Now), WithKeyPrefix(redistest.Prefix(t)), WithRegions("eu", deadPeers(t)))
	req := One("s", rules.User, "u1", ws...)
	// The key's name, from a peek, which writes nothing.
	if _, err := e.Peek(ctx, req); err != nil {
		t.Fatal(err)
	}
	key := e.keyer.AppendKeyOf(nil, "s", rules.User, "", "", "u1", false)
	for i := range p {
		// Halfway back in the first window: outside a shorter one.
		at := clk.Now().Add(-ws[0].Period / 2).UnixMicro()
		c.ZAdd(ctx, string(key), redis.Z{Score: float64(at - int64(i)), Member: "peer" + string(rune('a'+i))})
	}
	want := (10 - p + 1) / 3
	for i := range want + 2 {
		clk.Add(time.Millisecond)
		d, err := e.Allow(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < want) {
			t.Fatalf("%d peer entries: request %d allowed %v, want %v (share %d)", p, i, d.Allowed, i < want, want)
		}
		// Full for the region's share whatever it has not had
		// acknowledged (V > L - R + r), only a departure makes room: the
		// wait is the oldest entry's, and the denial may come from the
		// cache. Otherwise an acknowledgement may: at most 250 ms.
		full := p+min(i, want) > 10-3+1
		if !d.Allowed && full && (d.RetryAfter < d.Windows[0].Reset || d.Windows[0].Reset <= 0 || d.Denied != (WindowState{}) ||
			i == want+1 && d.Source != "cache") {
			t.Errorf("share denial %d, full: RetryAfter %v, Reset %v, Denied %+v, source %s; want the reset, no window, the cache after the first",
				i, d.RetryAfter, d.Windows[0].Reset, d.Denied, d.Source)
		}
		// The first such denial comes from Redis, the next, 1 ms later,
		// from the cache, which holds it until an acknowledgement may
		// have come (plan.ShareHold).
		wantSource, most := "redis", 250*time.Millisecond
		if i == want+1 {
			wantSource, most = "cache", plan.ShareHold*time.Microsecond
		}
		if !d.Allowed && !full && (d.RetryAfter <= 0 || d.RetryAfter > most || d.Denied != (WindowState{}) || d.Source != wantSource) {
			t.Errorf("share denial %d: RetryAfter %v, Denied %+v, source %s; want in (0, %v], no window, %s",
				i, d.RetryAfter, d.Denied, d.Source, most, wantSource)
		}
		// An admission's remaining is what the share leaves where the
		// script counted U (3V > 10 - 3 + 1, V = p + i before it, U = i).
		if d.Allowed {
			rem := int64(10 - p - i - 1)
			if 3*(p+i) > 8 {
				rem = min(rem, int64(want-i-1))
			}
			if d.Windows[0].Remaining != rem {
				t.Errorf("%d peer entries: admission %d: Remaining %d, want %d", p, i, d.Windows[0].Remaining, rem)
			}
		}
		// A share denial leaves nothing to admit now in the binding window.
		if !d.Allowed && d.Windows[0].Remaining != 0 {
			t.Errorf("share denial: Remaining %d in the binding window, want 0", d.Windows[0].Remaining)
		}
	}
	// The cache holds a share denial no longer than plan.ShareHold.
	if full := p+want > 10-3+1; !full {
		clk.Add(plan.ShareHold * time.Microsecond)
		if d, err := e.Allow(ctx, req); err != nil || d.Allowed || d.Source != "redis" {
			t.Errorf("a share denial after the cache's hold: allowed %v, source %s, %v; want denied by redis", d.Allowed, d.Source, err)
		}
	}
	if n := c.ZCount(ctx, string(key), "-inf", copiesMax).Val(); n != int64(want) {
		t.Errorf("unstable entries = %d, want %d", n, want)
	}
	if ttl := c.PTTL(ctx, string(key)).Val(); want > 0 && ttl <= 0 {
		t.Errorf("key PTTL = %v, want > 0", ttl)
	}
	// A regional request: (a) alone.
	reg := One("s2", rules.User, "u1", win(10, time.Minute))
	reg.Regional = true
	for i := range 11 {
		d, _ := e.Allow(ctx, reg)
		if d.Allowed != (i < 10) {
			t.Fatalf("regional request %d allowed %v", i, d.Allowed)
		}
	}
}

// TestRegionsShareRule checks the share rule (rule (b) of docs/regions.md)
// in the deciding script on miniredis and a real redis-server.
func TestRegionsShareRule(t *testing.T) {
	t.Parallel()
	for _, p := range []int{0, 4, 9} {
		_, mc := redistest.Mini(t)
		shareCase(t, mc, p)
	}
	_, rc := redistest.StartClient(t)
	for _, p := range []int{0, 4, 9} {
		shareCase(t, rc, p)
	}
}

// TestRegionsRefused checks that with regions a request the share rule
// does not cover (a cost, a calendar window) is invalid unless regional.
func TestRegionsRefused(t *testing.T) {
	_, mc := redistest.Mini(t)
	e := newEngine(t, mc, WithRegions("eu", deadPeers(t)))
	req := One("s", rules.User, "u1", win(10, time.Minute))
	req.Checks[0].Rule.Cost = "bytes"
	req.Checks[0].Cost = 5
	_, err := e.Allow(context.Background(), req)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "regions:local") {
		t.Fatalf("a cost under regions: %v, want ErrInvalid naming regions:local", err)
	}
	req.Regional = true
	if d, err := e.Allow(context.Background(), req); err != nil || !d.Allowed {
		t.Fatalf("regional with a cost: %v, %v", d.Allowed, err)
	}
}

// TestRegionsOptions checks WithRegions' mistakes.
func TestRegionsOptions(t *testing.T) {
	_, mc := redistest.Mini(t)
	for _, peers := range []map[string]Client{
		{"eu": mc}, {"": mc}, {"us": nil}, {"us": (*redis.Client)(nil)},
	} {
		if _, err := New(mc, WithRegions("eu", peers)); !errors.Is(err, ErrInvalid) {
			t.Errorf("peers %v: %v, want ErrInvalid", peers, err)
		}
	}
	if _, err := New(mc, WithRegions("", map[string]Client{"us": mc})); !errors.Is(err, ErrInvalid) {
		t.Errorf("empty local: %v", err)
	}
}

// TestRegionsBlock checks that under regions a denial by the share rule
// that an acknowledgement could lift starts no block, and a full window's
// denial does, as does one of a window full for the region's share.
func TestRegionsBlock(t *testing.T) {
	ctx := context.Background()
	_, c := redistest.Mini(t)
	clk := redistest.NewClock()
	e := newEngine(t, c, WithClock(clk.Now), WithKeyPrefix(redistest.Prefix(t)), WithRegions("eu", deadPeers(t)))
	req := One("s", rules.User, "u1", win(10, time.Minute))
	req.Checks[0].Block = time.Minute
	for i := range 4 {
		clk.Add(time.Millisecond)
		d, _ := e.Allow(ctx, req)
		if d.Allowed != (i < 3) || d.Blocked {
			t.Fatalf("request %d: allowed %v, blocked %v; want the share, 3, and no block", i, d.Allowed, d.Blocked)
		}
	}
	key := string(e.keyer.AppendKeyOf(nil, "s", rules.User, "", "", "u1", false))
	for i := range 7 {
		c.ZAdd(ctx, key, redis.Z{Score: float64(clk.Now().UnixMicro() - int64(i)), Member: "peer" + string(rune('a'+i))})
	}
	clk.Add(time.Millisecond)
	if d, _ := e.Allow(ctx, req); d.Allowed || !d.Blocked {
		t.Fatalf("a full window: allowed %v, blocked %v; want a block", d.Allowed, d.Blocked)
	}
	// A window full for the region's share (V > L - R + r = 8): eu admits
	// its share of the headroom 8 peer entries leave, 1, and its next
	// denial, which only an entry leaving could lift, blocks.
	req = One("s", rules.User, "u2", win(10, time.Minute))
	req.Checks[0].Block = time.Minute
	key = string(e.keyer.AppendKeyOf(nil, "s", rules.User, "", "", "u2", false))
	for i := range 8 {
		c.ZAdd(ctx, key, redis.Z{Score: float64(clk.Now().UnixMicro() - int64(i)), Member: "peer" + string(rune('a'+i))})
	}
	for i, want := range []bool{true, false} {
		clk.Add(time.Millisecond)
		d, _ := e.Allow(ctx, req)
		if d.Allowed != want || d.Blocked == want {
			t.Fatalf("u2, request %d: allowed %v, blocked %v; want the share, 1, then a block", i, d.Allowed, d.Blocked)
		}
		if !want && d.RetryAfter < 50*time.Second {
			t.Errorf("u2's block: retry after %v, want about a minute", d.RetryAfter)
		}
	}
}

// TestRegionsOffWritesNothing checks that an engine without regions, and
// a regional request with them, write no copy.
func TestRegionsOffWritesNothing(t *testing.T) {
	ctx := context.Background()
	_, c := redistest.Mini(t)
	prefix := redistest.Prefix(t)
	off := newEngine(t, c, WithKeyPrefix(prefix))
	on := newEngine(t, c, WithKeyPrefix(prefix), WithRegions("eu", deadPeers(t)))
	req := One("s", rules.User, "u1", win(10, time.Minute))
	regional := req
	regional.Regional = true
	for range 3 {
		if _, err := off.Allow(ctx, req); err != nil {
			t.Fatal(err)
		}
		if _, err := on.Allow(ctx, regional); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range scanKeys(t, c, prefix) {
		if n := c.ZCount(ctx, k, "-inf", copiesMax).Val(); n != 0 {
			t.Errorf("%d copies in %q without a shared request", n, k)
		}
	}
}

// copiesMax is the highest score of a copy of an admission in its count
// key (see Regions in lua/multi_window.lua): -(2^52 + stamp).
const copiesMax = "-4503599627370496"

// TestRegionsShareFullCached checks that a window full for the region's
// share whatever it has not had acknowledged (plan.Share.Full) denies from
// the cache of denials, as a full window does, with no remaining, no full
// window named and the wait of its oldest entry, until that entry leaves:
// then Redis decides again.
func TestRegionsShareFullCached(t *testing.T) {
	mini := func() redis.UniversalClient { _, c := redistest.Mini(t); return c }
	real := func() redis.UniversalClient { _, c := redistest.StartClient(t); return c }
	for name, start := range map[string]func() redis.UniversalClient{"miniredis": mini, "redis": real} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			local := start()
			e := newEngine(t, local, WithKeyPrefix(redistest.Prefix(t)),
				WithRegions("eu", map[string]Client{"ap": start(), "us": start()}))
			// Region eu is index 1 of 3: with everything acknowledged it
			// holds V <= 5 - 3 + 1 = 3 before its share is 0.
			req := One("s", rules.User, "u1", win(5, 2*time.Second))
			admitted, first := 0, time.Time{}
			deadline := time.Now().Add(time.Second)
			for admitted < 4 && time.Now().Before(deadline) {
				d, err := e.Allow(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					if admitted == 0 {
						first = time.Now() // at or after the oldest entry's stamp
					}
					admitted++
					continue
				}
				time.Sleep(5 * time.Millisecond) // an acknowledgement makes room
			}
			if admitted != 4 {
				t.Fatalf("admitted %d within a second, want 4", admitted)
			}
			for range 3 {
				d, err := e.Allow(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed || d.Source != "cache" || d.Windows[0].Remaining != 0 || d.Denied != (WindowState{}) ||
					d.RetryAfter < time.Second || d.RetryAfter > 2*time.Second {
					t.Fatalf("share full: allowed %v, source %s, remaining %d, denied %+v, RetryAfter %v; want a cached denial, 0, no window, the oldest entry's wait",
						d.Allowed, d.Source, d.Windows[0].Remaining, d.Denied, d.RetryAfter)
				}
			}
			// Once the oldest entry has left, Redis decides and admits.
			time.Sleep(time.Until(first.Add(2*time.Second + 50*time.Millisecond)))
			d, err := e.Allow(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed || d.Source != "redis" {
				t.Errorf("after the oldest entry left: allowed %v, source %s; want admitted by redis", d.Allowed, d.Source)
			}
		})
	}
}

// TestRegionsCopiesTrimmed checks that copies no peer acknowledged leave
// their count key with the entries they copy: the key's next epoch trims
// both, so a partition of any length holds no more than a window's copies.
// TestRegionsCluster runs the same on a Cluster.
func TestRegionsCopiesTrimmed(t *testing.T) {
	_, mc := redistest.Mini(t)
	copiesTrimmed(t, mc)
	_, rc := redistest.StartClient(t)
	copiesTrimmed(t, rc)
}

func copiesTrimmed(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	clk := redistest.NewClock()
	e := newEngine(t, c, WithClock(clk.Now), WithKeyPrefix(redistest.Prefix(t)), WithRegions("eu", deadPeers(t)))
	req := One("s", rules.User, "u1", win(30, 100*time.Millisecond))
	key := string(e.keyer.AppendKeyOf(nil, "s", rules.User, "", "", "u1", false))
	for round := range 5 {
		for range 3 {
			clk.Add(time.Millisecond)
			if d, err := e.Allow(ctx, req); err != nil || !d.Allowed {
				t.Fatalf("round %d: %v, %v", round, d.Allowed, err)
			}
		}
		// Entries and copies of this round only: the earlier ones left
		// the window (100 ms) and the key's retention.
		if n, m := c.ZCount(ctx, key, "0", "+inf").Val(), c.ZCount(ctx, key, "-inf", copiesMax).Val(); n != 3 || m != 3 {
			t.Fatalf("round %d: %d entries and %d copies, want 3 and 3", round, n, m)
		}
		clk.Add(250 * time.Millisecond)
	}
}
