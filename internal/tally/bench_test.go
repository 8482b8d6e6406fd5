package tally

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// BenchmarkCachedDenialTallies measures cached denials of one hot subject
// with the denial tallies on and off, from one goroutine and from
// GOMAXPROCS ones (what the tallies add: the hook's call, a shard's lock
// and a map lookup, or the hot subject's counter).
//
//	go test -run XXX -bench CachedDenialTallies -benchmem ./internal/tally
func BenchmarkCachedDenialTallies(b *testing.B) {
	s := redistest.Start(b)
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "tallies=off", true: "tallies=on"}[on]
		e := newEngine(b, s.Client(), engine.WithKeyPrefix(redistest.Prefix(b)+name))
		if on {
			withTallies(b, e, DefaultFlush)
		}
		req := engine.Request{
			Scope:  "bench",
			Checks: []engine.Check{{Rule: rules.Rule{Kind: rules.Key, Name: "bench", Windows: []rules.Window{win(1, time.Minute), win(10, time.Hour)}}, Subject: "hot"}},
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

// BenchmarkTallyNote measures Note alone on one hot subject.
func BenchmarkTallyNote(b *testing.B) {
	tl := New(Store{}) // never written
	d := denial("s", "hot")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tl.Note(d)
		}
	})
}

// BenchmarkTallyNoteSerial is BenchmarkTallyNote from one goroutine.
func BenchmarkTallyNoteSerial(b *testing.B) {
	tl := New(Store{}) // never written
	d := denial("s", "hot")
	b.ReportAllocs()
	for b.Loop() {
		tl.Note(d)
	}
}

// BenchmarkTallyFlood denies b.N distinct subjects through Allow on a real
// Redis (each subject asks twice in a window of 1: admitted, then denied,
// from the cache when it can) from GOMAXPROCS goroutines, lets the tallies
// write, and reports the tally keys' Redis memory and the heap after a GC:
//
//	go test -run XXX -bench TallyFlood -benchtime 1000000x ./internal/tally
func BenchmarkTallyFlood(b *testing.B) {
	s := redistest.Start(b)
	c := s.Client()
	prefix := redistest.Prefix(b)
	e := newEngine(b, c, engine.WithKeyPrefix(prefix))
	tl := withTallies(b, e, 100*time.Millisecond)
	lim := rules.Rule{Kind: rules.Key, Name: "k", Windows: []rules.Window{win(1, time.Hour)}}
	ctx := context.Background()
	var n atomic.Int64
	var denied atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := engine.Request{Scope: "flood", Checks: []engine.Check{{Rule: lim}}}
		for pb.Next() {
			req.Checks[0].Subject = "s" + strconv.FormatInt(n.Add(1), 10)
			e.Allow(ctx, req)
			if d, _ := e.Allow(ctx, req); !d.Allowed && d.Denied.Window.Limit != 0 {
				denied.Add(1)
			}
		}
	})
	b.StopTimer()
	if denied.Load() != int64(b.N) {
		b.Fatalf("%d of %d denied by a window", denied.Load(), b.N)
	}
	time.Sleep(300 * time.Millisecond) // the last writes
	var bytes int64
	keys := scanKeys(b, c, prefix+"{tally}:")
	for _, k := range keys {
		bytes += c.MemoryUsage(ctx, k).Val()
	}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(bytes)/(1<<20), "tally-MiB")
	b.ReportMetric(float64(len(keys)), "tally-keys")
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(tl.Stats().Overflow), "overflow")
}
