package engine

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// The benchmarks start their own redis-server. Windows are generous so
// nearly every call is admitted and writes (the expensive path, as with
// redis_rate at 1e6/s); the hot key's sorted set stays near 100k entries.
//
//	go test -run XXX -bench . -benchtime 5s ./engine
func BenchmarkAllow(b *testing.B) {
	s := redistest.Start(b)
	rc := s.Client()
	windows := map[string][]rules.Window{
		"1win": {win(100_000, time.Second)},
		"2win": {win(100_000, 100*ms), win(1_000_000, time.Second)},
	}
	for _, nw := range []string{"1win", "2win"} {
		for _, keys := range []int{1, 10_000} {
			for _, par := range []int{1, 8, 64} {
				name := nw + "/keys=" + strconv.Itoa(keys) + "/callers=" + strconv.Itoa(par)
				b.Run(name, func(b *testing.B) {
					e := newEngine(b, rc, WithKeyPrefix(redistest.Prefix(b)))
					benchAllow(b, e, windows[nw], keys, par)
				})
			}
		}
	}
}

// BenchmarkAllowCluster runs the 2-window case on a 3-master cluster, one
// key per request (one script call per decision, pipelined per batch).
func BenchmarkAllowCluster(b *testing.B) {
	cl := redistest.StartCluster(b)
	cc := cl.Client(b)
	ws := []rules.Window{win(100_000, 100*ms), win(1_000_000, time.Second)}
	for _, par := range []int{1, 64} {
		b.Run("2win/keys=10000/callers="+strconv.Itoa(par), func(b *testing.B) {
			e := newEngine(b, cc, WithKeyPrefix(redistest.Prefix(b)))
			benchAllow(b, e, ws, 10_000, par)
		})
	}
}

func benchAllow(b *testing.B, e *Engine, ws []rules.Window, keys, callers int) {
	subjects := make([]string, keys)
	for i := range subjects {
		subjects[i] = strconv.Itoa(i)
	}
	ctx := context.Background()
	var next atomic.Int64
	var denied, failed atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	run := func(pb func() bool) {
		req := Request{Scope: "bench", Checks: []Check{{Rule: rules.Rule{Kind: rules.User, Windows: ws}}}}
		local := make([]time.Duration, 0, 1024)
		for i := 0; pb(); i++ {
			req.Checks[0].Subject = subjects[int(next.Add(1))%keys]
			t := time.Now()
			d, err := e.Allow(ctx, req)
			if i&7 == 0 && len(local) < cap(local) {
				local = append(local, time.Since(t))
			}
			if err != nil {
				failed.Add(1)
			} else if !d.Allowed {
				denied.Add(1)
			}
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	}
	if callers == 1 {
		n := 0
		run(func() bool { n++; return n <= b.N })
	} else {
		// RunParallel starts GOMAXPROCS*p goroutines.
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((callers + procs - 1) / procs)
		b.RunParallel(func(pb *testing.PB) { run(pb.Next) })
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "decisions/s")
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d calls failed", f)
	}
	b.ReportMetric(float64(denied.Load())/float64(b.N), "denied/op")
}
