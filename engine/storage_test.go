package engine

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// keyOf returns the Redis key of a check in scope.
func (e *Engine) keyOf(scope string, c Check) string {
	return string(e.keyer.AppendKey(nil, scope, c.Kind, c.Name, plan.KeyCost(&c.Rule), c.Subject))
}

// entries returns the admission times (scores >= 0) of key; markers are
// left out.
func entries(t *testing.T, rc redis.Cmdable, key string) []int64 {
	t.Helper()
	zs, err := rc.ZRangeByScoreWithScores(context.Background(), key, &redis.ZRangeBy{Min: "0", Max: "+inf"}).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ts []int64
	for _, z := range zs {
		ts = append(ts, int64(z.Score))
	}
	return ts
}

func mustAllow(t *testing.T, e *Engine, r Request, want bool) Decision {
	t.Helper()
	d, err := e.Allow(context.Background(), r)
	// A denial may come from the cache of Redis's answers.
	if err != nil || d.Allowed != want || d.Source != "redis" && (d.Source != "cache" || want) {
		t.Fatalf("Allow: allowed=%v source=%v err=%v, want allowed=%v from Redis", d.Allowed, d.Source, err, want)
	}
	return d
}

func TestStorage(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	ctx := context.Background()
	us := func(d time.Duration) int64 { return redistest.Epoch.Add(d).UnixMicro() }

	t.Run("groups sharing a key keep the longest retention", func(t *testing.T) {
		t.Parallel()
		prefix := redistest.Prefix(t)
		afterTTLs(t, rc, prefix)
		clk := redistest.NewClock()
		e := newEngine(t, rc, WithKeyPrefix(prefix), WithClock(clk.Now))
		long := req(user("u", win(10, time.Minute)))
		short := req(user("u", win(10, time.Second)))
		key := e.keyOf("s", long.Checks[0])

		mustAllow(t, e, short, true)
		if d, _ := rc.PTTL(ctx, key).Result(); d > 3*time.Second {
			t.Fatalf("PTTL after the 1s group: %v", d)
		}
		clk.Set(10 * time.Second)
		mustAllow(t, e, long, true) // the retention grows to a minute
		if d, _ := rc.PTTL(ctx, key).Result(); d < time.Minute {
			t.Fatalf("PTTL after the 1m group: %v, want >= 1m", d)
		}
		clk.Set(20 * time.Second)
		mustAllow(t, e, short, true) // must not trim by its own 1s window
		clk.Set(30 * time.Second)
		mustAllow(t, e, short, true)
		if got, want := entries(t, rc, key), []int64{us(0), us(10 * time.Second), us(20 * time.Second), us(30 * time.Second)}; !slices.Equal(got, want) {
			t.Fatalf("entries %v, want %v", got, want)
		}
		// The minute holds 0s, 10s, 20s, 30s and this request.
		if d := mustAllow(t, e, long, true); d.Windows[0].Used != 5 {
			t.Fatalf("used %d, want 5", d.Windows[0].Used)
		}
		if d, _ := rc.PTTL(ctx, key).Result(); d < time.Minute {
			t.Fatalf("PTTL after the 1s group's next epoch: %v, want >= 1m", d)
		}
	})

	t.Run("first admission of an epoch trims", func(t *testing.T) {
		t.Parallel()
		prefix := redistest.Prefix(t)
		afterTTLs(t, rc, prefix)
		clk := redistest.NewClock()
		e := newEngine(t, rc, WithKeyPrefix(prefix), WithClock(clk.Now))
		r := req(user("u", win(10, time.Second)))
		key := e.keyOf("s", r.Checks[0])
		for _, at := range []time.Duration{100 * ms, 200 * ms, 900 * ms} {
			clk.Set(at)
			mustAllow(t, e, r, true)
		}
		clk.Set(1500 * ms) // new epoch (I = 1s): trims everything up to 0.5s
		mustAllow(t, e, r, true)
		if got, want := entries(t, rc, key), []int64{us(900 * ms), us(1500 * ms)}; !slices.Equal(got, want) {
			t.Fatalf("entries %v, want %v", got, want)
		}
	})

	t.Run("denial and peek write nothing", func(t *testing.T) {
		t.Parallel()
		prefix := redistest.Prefix(t)
		afterTTLs(t, rc, prefix)
		clk := redistest.NewClock()
		e := newEngine(t, rc, WithKeyPrefix(prefix), WithClock(clk.Now))
		r := req(ip("10.0.0.1", win(100, time.Minute)), user("u", win(1, time.Minute)),
			Check{Rule: rules.Rule{Kind: rules.Global, Windows: []rules.Window{win(100, time.Minute)}}})
		mustAllow(t, e, r, true)
		dump := func() []string {
			var all []string
			for _, c := range r.Checks {
				k := e.keyOf("s", c)
				zs, err := rc.ZRangeWithScores(ctx, k, 0, -1).Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, z := range zs {
					all = append(all, k+" "+z.Member.(string)+" "+time.Duration(z.Score).String())
				}
			}
			return all
		}
		ttl := func() time.Duration {
			d, _ := rc.PTTL(ctx, e.keyOf("s", r.Checks[0])).Result()
			return d
		}
		before, ttlBefore := dump(), ttl()
		// An hour later in the epoch numbering: a write would trim and
		// bump the expiry.
		clk.Set(time.Hour - time.Millisecond)
		r.Checks[1].Windows[0].Period = 2 * time.Hour
		if d, _ := e.Allow(ctx, r); d.Allowed {
			t.Fatal("second request admitted")
		}
		if _, err := e.peek(ctx, r); err != nil {
			t.Fatal(err)
		}
		if after := dump(); !slices.Equal(before, after) {
			t.Fatalf("denial or peek wrote:\nbefore %v\nafter  %v", before, after)
		}
		if after := ttl(); after > ttlBefore {
			t.Fatalf("denial or peek extended the TTL: %v -> %v", ttlBefore, after)
		}
	})

	t.Run("reset deletes the key", func(t *testing.T) {
		t.Parallel()
		prefix := redistest.Prefix(t)
		afterTTLs(t, rc, prefix)
		e := newEngine(t, rc, WithKeyPrefix(prefix))
		r := req(user("u", win(1, time.Minute)))
		mustAllow(t, e, r, true)
		mustAllow(t, e, r, false)
		if err := e.resetSubject(ctx, "s", r.Checks[0].Rule, "u"); err != nil {
			t.Fatal(err)
		}
		if n, _ := rc.Exists(ctx, e.keyOf("s", r.Checks[0])).Result(); n != 0 {
			t.Fatal("key still exists")
		}
		mustAllow(t, e, r, true)
	})
}

// TestNewKeyNotTrimmed checks the bookkeeping's trim: a key's first
// admission runs none (the key holds only that admission's entry), and
// an existing key's next epoch still trims what its retention no longer
// needs.
func TestNewKeyNotTrimmed(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	clk := redistest.NewClock()
	e := newEngine(t, rc, WithClock(clk.Now))
	r := req(user("u", win(10, time.Minute), win(5, time.Second)))
	key := e.keyOf("s", r.Checks[0])

	trims := cmdCalls(t, rc, "zremrangebyscore")
	mustAllow(t, e, r, true)
	if n := cmdCalls(t, rc, "zremrangebyscore") - trims; n != 0 {
		t.Errorf("a new key's admission ran %d ZREMRANGEBYSCORE, want 0", n)
	}
	// Two minutes on, the first entry is past the retention: the next
	// epoch's first admission trims it.
	clk.Set(2 * time.Minute)
	mustAllow(t, e, r, true)
	if got := entries(t, rc, key); len(got) != 1 || got[0] != redistest.Epoch.Add(2*time.Minute).UnixMicro() {
		t.Errorf("entries after the next epoch: %v, want only the new one", got)
	}
}

// cmdCalls returns how many times the server has run command name
// (lower case, as INFO commandstats names it).
func cmdCalls(t *testing.T, rc *redis.Client, name string) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(info, "cmdstat_"+name+":calls=")
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
