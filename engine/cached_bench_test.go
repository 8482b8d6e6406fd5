package engine

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// BenchmarkCachedDenial measures a denial made from the cache (no Redis
// call): a 2-window group whose minute window the first call fills. An
// answer older than a second is asked again, so a few calls go to Redis.
//
//	go test -run XXX -bench CachedDenial -benchmem ./engine
func BenchmarkCachedDenial(b *testing.B) {
	s := redistest.Start(b)
	e := newEngine(b, s.Client(), WithPrefix(testPrefix(b)))
	req := Request{
		Scope:  "bench",
		Checks: []Check{{Limiter: rules.Limiter{Kind: rules.Key, Name: "bench", Windows: []rules.Window{win(1, time.Minute), win(10, time.Hour)}}, Subject: "hot"}},
		Fail:   rules.FailClosed,
	}
	ctx := context.Background()
	if d, err := e.Allow(ctx, req); err != nil || !d.Allowed {
		b.Fatalf("first call: %+v, %v", d, err)
	}
	if d, _ := e.Allow(ctx, req); d.Allowed {
		b.Fatalf("second call: %+v", d)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cached := 0
	for i := 0; i < b.N; i++ {
		if d, _ := e.Allow(ctx, req); d.Allowed {
			b.Fatalf("call %d admitted", i)
		} else if d.Source == FromCache {
			cached++
		}
	}
	// An answer older than a second is asked again: a few calls go to Redis.
	b.ReportMetric(float64(cached)/float64(b.N), "cached/op")
}
