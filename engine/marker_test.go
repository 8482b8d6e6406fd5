package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// markers returns the members of key with negative scores (the retention
// and epoch markers).
func markers(t *testing.T, rc redis.Cmdable, key string) []string {
	t.Helper()
	ms, err := rc.ZRangeByScore(context.Background(), key, &redis.ZRangeBy{Min: "-inf", Max: "(0"}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestEpochMarkers checks that a count key keeps the markers of its
// current epochs only: each epoch's two markers are added with the
// first admission of the epoch, and those of ended epochs go at the next
// epoch's first admission, for every group sharing the key.
func TestEpochMarkers(t *testing.T) {
	t.Parallel()
	_, rc := startRedis(t)
	prefix := testPrefix(t)
	afterTTLs(t, rc, prefix)
	clk := newFakeClock()
	e := newEngine(t, rc, WithPrefix(prefix), WithClock(clk.Now))
	short := req(user("u", win(1000, time.Second)))
	long := req(user("u", win(1000, 10*time.Second)))
	key := e.keyOf("s", short.Checks[0])

	count := func(want int) {
		t.Helper()
		ms := markers(t, rc, key)
		n := 0
		for _, m := range ms {
			if strings.HasPrefix(m, "e") || strings.HasPrefix(m, "f") {
				n++
			}
		}
		if n != want {
			t.Fatalf("%d epoch markers %v, want %d", n, ms, want)
		}
	}
	for i := range 30 {
		clk.Set(time.Duration(i) * 300 * ms)
		mustAllow(t, e, short, true)
		count(2)
	}
	// A second group (epoch 10 s) shares the key: its retention is
	// longer, so every epoch marker goes and only its own come back (each
	// group then runs its bookkeeping again); then both groups' current
	// markers stay while their epochs last.
	mustAllow(t, e, long, true)
	count(2)
	clk.Set(9500 * ms)
	mustAllow(t, e, short, true)
	count(4)
	// At 10.5 s both epochs that held 9.5 s have ended; the short group's
	// new epoch removes them all, the long group's comes back with its
	// next admission.
	clk.Set(10500 * ms)
	mustAllow(t, e, short, true)
	count(2)
	mustAllow(t, e, long, true)
	count(4)
	if d, _ := rc.PTTL(context.Background(), key).Result(); d < 10*time.Second {
		t.Fatalf("PTTL %v, want >= the long group's 10s", d)
	}
}
