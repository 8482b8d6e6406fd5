package engine

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// BenchmarkCachedDenial measures a denial made from the cache (no Redis
// call): a 2-window group whose minute window the first call fills, and a
// minute and a calendar month whose month the first call fills. An answer
// older than a second is asked again, so a few calls go to Redis.
//
//	go test -run XXX -bench CachedDenial -benchmem ./engine
func BenchmarkCachedDenial(b *testing.B) {
	s := redistest.Start(b)
	for _, g := range []struct {
		name string
		ws   []rules.Window
	}{
		{"2-window", []rules.Window{win(1, time.Minute), win(10, time.Hour)}},
		{"calendar", []rules.Window{win(10, time.Minute), calWin(1, ruletime.Month)}},
	} {
		b.Run(g.name, func(b *testing.B) {
			e := newEngine(b, s.Client(), WithKeyPrefix(redistest.Prefix(b)))
			req := Request{
				Scope:  "bench",
				Checks: []Check{{Rule: rules.Rule{Kind: rules.Key, Name: "bench", Windows: g.ws}, Subject: "hot"}},
				Fail:   rules.FailClosed,
			}
			benchCachedDenial(b, e, req)
		})
		b.Run(g.name+"/parallel", func(b *testing.B) {
			e := newEngine(b, s.Client(), WithKeyPrefix(redistest.Prefix(b)))
			req := Request{
				Scope:  "bench",
				Checks: []Check{{Rule: rules.Rule{Kind: rules.Key, Name: "bench", Windows: g.ws}, Subject: "hot"}},
				Fail:   rules.FailClosed,
			}
			ctx := context.Background()
			e.Allow(ctx, req)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, _ := e.Allow(ctx, req); d.Allowed {
						b.Error("admitted")
					}
				}
			})
		})
	}
}

// benchCachedDenial measures cached denials of req, whose first call
// fills a window.
func benchCachedDenial(b *testing.B, e *Engine, req Request) {
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
		} else if d.Source == "cache" {
			cached++
		}
	}
	// An answer older than a second is asked again: a few calls go to Redis.
	b.ReportMetric(float64(cached)/float64(b.N), "cached/op")
}
