package engine

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// BenchmarkCachedDenialTallies measures cached denials of one hot subject
// with the denial tallies on and off, from one goroutine and from
// GOMAXPROCS ones (what the tallies add: a shard's lock and a map lookup).
//
//	go test -run XXX -bench CachedDenialTallies -benchmem ./engine
func BenchmarkCachedDenialTallies(b *testing.B) {
	s := redistest.Start(b)
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "tallies=off", true: "tallies=on"}[on]
		e := newEngine(b, s.Client(), WithPrefix(testPrefix(b)+name), WithTallies(on))
		req := Request{
			Scope:  "bench",
			Checks: []Check{{Limiter: rules.Limiter{Kind: rules.Key, Name: "bench", Windows: []rules.Window{win(1, time.Minute), win(10, time.Hour)}}, Subject: "hot"}},
			Fail:   rules.FailClosed,
		}
		ctx := context.Background()
		e.Allow(ctx, req)
		e.Allow(ctx, req)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e.Allow(ctx, req)
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := req
				for pb.Next() {
					e.Allow(ctx, r)
				}
			})
		})
	}
}

// BenchmarkTallyNote measures noteDenial alone on one hot subject.
func BenchmarkTallyNote(b *testing.B) {
	e := &Engine{tally: newTallies()}
	req := One("s", rules.User, "hot", win(1, time.Minute))
	d := Decision{Denied: WindowState{Window: win(1, time.Minute)}}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e.noteDenial(&req, &d)
		}
	})
}

// BenchmarkTallyNoteSerial is BenchmarkTallyNote from one goroutine.
func BenchmarkTallyNoteSerial(b *testing.B) {
	e := &Engine{tally: newTallies()}
	req := One("s", rules.User, "hot", win(1, time.Minute))
	d := Decision{Denied: WindowState{Window: win(1, time.Minute)}}
	for b.Loop() {
		e.noteDenial(&req, &d)
	}
}
