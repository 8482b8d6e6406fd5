package slidelimit_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// BenchmarkThrottleLaneMemory reports the heap in use, after a garbage
// collection, that a throttle keeps once many distinct keys went through
// Wait and Finish and it is idle (docs/throttle.md, Lanes and Permits).
// The engine's cache of what Redis said per key counts too, up to its own
// bound (engine.WithLocalKeys, 100,000 keys by default); a run with that
// bound at 1,000 shows the throttle's share:
//
//	SLIDELIMIT_REQUIRE_REDIS=1 go test -run '^$' -bench ThrottleLaneMemory -benchtime 1x .
func BenchmarkThrottleLaneMemory(b *testing.B) {
	for _, bc := range []struct {
		name  string
		keys  int
		size  int // of each key value
		cache int // engine.WithLocalKeys; 0 for the default
	}{{"100000-keys", 100000, 0, 0}, {"100000-keys-engine-cache-1000", 100000, 0, 1000}, {"100-keys-of-1MiB", 100, 1 << 20, 0}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			var opts []slidelimit.Option
			if bc.cache > 0 {
				opts = append(opts, slidelimit.WithEngineOptions(engine.WithLocalKeys(bc.cache)))
			}
			lim, err := slidelimit.New(srv.Client(), opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer lim.Close()
			th, err := lim.Throttle("api", "key(k):100000/s")
			if err != nil {
				b.Fatal(err)
			}
			pad := strings.Repeat("x", bc.size)
			before := heapInUse()
			for n := range b.N {
				var wg sync.WaitGroup
				for w := range 8 {
					wg.Go(func() {
						for i := w; i < bc.keys; i += 8 {
							key := strconv.Itoa(n) + "-" + strconv.Itoa(i) + pad
							p, err := th.Wait(context.Background(), slidelimit.Call{Keys: map[string]string{"k": key}})
							if err != nil {
								b.Error(err)
								return
							}
							p.Finish(nil)
						}
					})
				}
				wg.Wait()
			}
			b.StopTimer()
			time.Sleep(time.Second) // idle: the finishes have left
			b.ReportMetric(float64(heapInUse()-before)/(1<<20), "heap-MiB")
			runtime.KeepAlive(th)
		})
	}
}

// heapInUse returns the bytes of the heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
