package engine

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestSemanticsRESP2 runs the scenarios through a client that speaks RESP2
// (go-redis's Protocol 2, which skips its push-notification checks): the
// script's replies and the cached denials' invalidations read the same.
func TestSemanticsRESP2(t *testing.T) {
	t.Parallel()
	s, _ := redistest.StartClient(t)
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2})
	t.Cleanup(func() { rc.Close() })
	for sc, cached := range cacheModes(append(scenarios(), unreadScenarios()...)) {
		t.Run(sc.name+cacheName(cached), func(t *testing.T) {
			t.Parallel()
			clk := redistest.NewClock()
			e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithClock(clk.Now), WithCachedDenials(cached))
			runScenario(t, e, clk, sc, fromRedis)
		})
	}
}
