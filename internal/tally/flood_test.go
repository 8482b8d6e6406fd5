package tally

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// TestTallyFloodBounded floods the tallies with 1M distinct denied
// subjects (and one subject denied in every period) over 66 minutes of
// the engine's clock, written to a real Redis, and measures what the
// tallies keep: in Redis, every bucket holds at most bucketTop entries and
// the buckets alive (those whose expiry has not passed on the engine's
// clock; the others are deleted, as their expiry would have done) take
// less than 10 MiB; in process, the heap does not grow with the subjects.
//
// Not parallel: the heap is the process's, and the parallel tests' own
// allocations (tens of MiB under the race detector) would be counted.
func TestTallyFloodBounded(t *testing.T) {
	_, c := redistest.StartClient(t)
	clk := redistest.NewClock()
	prefix := redistest.Prefix(t)
	st := storeOf(newEngine(t, c, engine.WithKeyPrefix(prefix), engine.WithClock(clk.Now)))
	st.Now = clk.Now
	tl := New(st)
	ctx := context.Background()
	before := redistest.UsedMemory(t, c)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapAlloc

	const subjects, periods = 1_000_000, 400
	deny := func(subject string) { tl.Note(denial("GET /files/{id}", subject)) }
	var keys []key
	var counts []int64
	var heapMax uint64
	for p := range periods {
		clk.Set(time.Duration(p) * 10 * time.Second)
		for i := range subjects / periods {
			deny("user-" + strconv.Itoa(p*(subjects/periods)+i))
			if i%100 == 0 {
				deny("heavy")
			}
		}
		n := 0
		for i := range tl.shards {
			n += len(tl.shards[i].keys)
		}
		if n > maxPending {
			t.Fatalf("period %d: %d entries pending in process, more than %d", p, n, maxPending)
		}
		keys, counts = tl.take(keys[:0], counts[:0])
		tl.flush(keys, counts)
		if p%50 == 0 {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			heapMax = max(heapMax, ms.HeapAlloc)
		}
	}
	// Expire what Redis would have by now on the engine's clock.
	now := clk.Now()
	var alive, members int64
	var bytes int64
	for _, key := range scanKeys(t, c, prefix+"{tally}:") {
		span, rest := fineBucket, strings.TrimPrefix(key, prefix+"{tally}:10s:")
		ttl := fineSpan + 2*fineBucket
		if rest == key {
			span, rest, ttl = coarseBucket, strings.TrimPrefix(key, prefix+"{tally}:1m:"), keep+2*coarseBucket
		}
		n, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			t.Fatalf("key %s", key)
		}
		if end := time.Unix(0, (n+1)*int64(span)); now.Sub(end) > ttl {
			c.Del(ctx, key)
			continue
		}
		alive++
		card := c.ZCard(ctx, key).Val()
		if card > bucketTop {
			t.Errorf("%s holds %d entries, more than %d", key, card, bucketTop)
		}
		members += card
		bytes += c.MemoryUsage(ctx, key).Val()
	}
	after := redistest.UsedMemory(t, c)
	t.Logf("1M subjects: %d buckets alive, %d entries, MEMORY USAGE %.2f MiB, used_memory +%.2f MiB; heap %.2f MiB before, at most %.2f MiB during; overflow %d",
		alive, members, float64(bytes)/(1<<20), float64(after-before)/(1<<20), float64(heap0)/(1<<20), float64(heapMax)/(1<<20),
		tl.Stats().Overflow)
	if bytes >= 10<<20 || after-before >= 10<<20 {
		t.Errorf("the tallies take %d bytes (used_memory +%d), not under 10 MiB", bytes, after-before)
	}
	if heapMax > heap0+16<<20 {
		t.Errorf("the heap grew from %d to %d bytes", heap0, heapMax)
	}
	if n := len(tl.names); n > maxNames {
		t.Errorf("the tallies remember %d subject names, more than %d", n, maxNames)
	}
	top, err := tl.TopDenied(ctx, time.Hour, 1)
	if err != nil || len(top) != 1 || top[0].Subject != "heavy" {
		t.Errorf("top of the hour: %+v, %v; want heavy first", top, err)
	}
}

// roundTrips is a go-redis hook counting round trips: a command or a
// pipeline, but not the handshake of a new connection (HELLO, then a
// pipeline of CLIENT commands), which depends on the pool.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "hello" {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() != "client" {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestTallyNoRoundTrip: the same requests (admitted, denied by Redis,
// denied from the cache) take the same round trips with tallies on and
// off; the tallies' write is one pipeline per period, here the one Close
// makes.
func TestTallyNoRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := redistest.StartClient(t)
	ctx := context.Background()
	var trips [2]int64
	var closing [2]int64
	for i, on := range []bool{true, false} {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		t.Cleanup(func() { c.Close() })
		e := newEngine(t, c, engine.WithKeyPrefix(redistest.Prefix(t)+fmt.Sprint(on)))
		var tl *Tallies
		if on {
			tl = withTallies(t, e, MaxFlush)
		}
		// The first script call loads the script (NOSCRIPT, then EVAL):
		// made before counting, so that the order of the engines does not
		// matter.
		e.Allow(ctx, engine.One("warm-up", rules.User, "u", win(3, time.Hour)))
		rt := &roundTrips{}
		c.AddHook(rt)
		var cached int
		for u := range 5 {
			for range 20 {
				d, _ := e.Allow(ctx, engine.One("s", rules.User, fmt.Sprint("u", u), win(3, time.Hour)))
				if d.Source == "cache" {
					cached++
				}
			}
		}
		if cached < 5*16 {
			t.Fatalf("tallies %v: %d cached denials, want 80 of the 85: all but each user's first denial", on, cached)
		}
		trips[i] = rt.n.Load()
		e.Close()
		if tl != nil {
			tl.Close()
		}
		closing[i] = rt.n.Load() - trips[i]
	}
	if trips[0] != trips[1] {
		t.Errorf("100 requests: %d round trips with tallies, %d without", trips[0], trips[1])
	}
	if closing[0] != 1 || closing[1] != 0 {
		t.Errorf("Close: %d round trips with tallies (want 1, the write), %d without (want 0)", closing[0], closing[1])
	}
	t.Logf("100 requests (85 denied): %d round trips, tallies on or off", trips[0])
}
