package engine

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// BenchmarkRenew measures one renewal period of an engine holding 1,000
// slots of running requests on 1,000 subjects (one script call on one
// server); ns/slot is the renewal cost per running request and period.
//
//	go test -run XXX -bench Renew ./engine
func BenchmarkRenew(b *testing.B) {
	s := redistest.Start(b)
	e := newEngine(b, s.Client(), WithKeyPrefix(redistest.Prefix(b)), WithLease(time.Hour))
	const held = 1000
	for i := range held {
		d, err := e.Allow(context.Background(), One("r", rules.User, strconv.Itoa(i), rules.Window{Limit: 1, Concurrent: true}))
		if err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		e.slots.Renew()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/held, "ns/slot")
}

// BenchmarkRelease measures Allow then Release of one request with an
// in-flight window, against Allow alone of the same rate windows, one
// caller.
func BenchmarkRelease(b *testing.B) {
	s := redistest.Start(b)
	ctx := context.Background()
	rate := []rules.Window{win(1e9, time.Second), win(1e9, time.Minute)}
	b.Run("allow", func(b *testing.B) {
		e := newEngine(b, s.Client(), WithKeyPrefix(redistest.Prefix(b)))
		req := One("r", rules.User, "u", rate...)
		for b.Loop() {
			if d, err := e.Allow(ctx, req); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	b.Run("allow-slot", func(b *testing.B) {
		e := newEngine(b, s.Client(), WithKeyPrefix(redistest.Prefix(b)), WithLease(time.Hour))
		req := One("r", rules.User, "u", append(rate, rules.Window{Limit: 1e6, Concurrent: true})...)
		for b.Loop() {
			if d, err := e.Allow(ctx, req); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	b.Run("allow+release", func(b *testing.B) {
		e := newEngine(b, s.Client(), WithKeyPrefix(redistest.Prefix(b)))
		req := One("r", rules.User, "u", append(rate, rules.Window{Limit: 1000, Concurrent: true})...)
		for b.Loop() {
			d, err := e.Allow(ctx, req)
			if err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
			if err := e.release(ctx, req, d); err != nil {
				b.Fatal(err)
			}
		}
	})
}
