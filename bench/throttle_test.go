package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// throttleRules saturate at 500 calls a second: every waiter waits.
const throttleRules = "global:50/100ms"

// BenchmarkThrottleWait: 1, 8 and 64 goroutines call Throttle.Wait in a
// loop on one saturated throttle (500 calls/s), spread over up to three
// Limiters (processes) on one redis-server, finishing each permit at
// once. An op is one admitted call. It reports:
//   - redis-calls/admit: commands sent to Redis per admitted call
//     (decisions, the fleet order's script; a Finish of a call without
//     slot or cost sends nothing);
//   - overtake-p99-ms and overtake-max-ms: by how much a call arrived
//     after one that was admitted later (0 when admitted in arrival
//     order), over all admitted calls;
//   - go-µs/admit and redis-µs/admit: CPU per admitted call of this
//     process and of redis-server; other-cores as in BenchmarkAllow.
//
// Run it with a fixed count: go test -run '^$' -bench ThrottleWait -benchtime 1500x
func BenchmarkThrottleWait(b *testing.B) {
	for _, waiters := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("waiters-%d", waiters), func(b *testing.B) { benchThrottleWait(b, waiters) })
	}
}

func benchThrottleWait(b *testing.B, waiters int) {
	ctx := context.Background()
	admin := newClient(benchAddr, 4)
	defer admin.Close()
	if err := admin.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	procs := min(waiters, 3)
	var counter redistest.CommandCounter
	ths := make([]*slidelimit.Throttle, procs)
	for i := range procs {
		rdb := redis.NewClient(&redis.Options{Addr: benchAddr, PoolSize: 64, ContextTimeoutEnabled: true})
		defer rdb.Close()
		lim, err := slidelimit.New(rdb,
			slidelimit.WithTimeout(2*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		defer lim.Close()
		if ths[i], err = lim.Throttle("bench", throttleRules); err != nil {
			b.Fatal(err)
		}
		rdb.AddHook(&counter)
	}
	// Saturate before measuring: the first window's calls are admitted
	// at once.
	for range 50 {
		p, err := ths[0].Wait(ctx, slidelimit.Call{})
		if err != nil {
			b.Fatal(err)
		}
		p.Finish(nil)
	}
	type admission struct{ arrived, admitted int64 }
	var mu sync.Mutex
	log := make([]admission, 0, b.N)
	var left atomic.Int64
	left.Store(int64(b.N))
	calls0 := counter.Count()
	c0 := sampleCPU(ctx, admin)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range waiters {
		th := ths[w%procs]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				arrived := time.Now().UnixNano()
				p, err := th.Wait(ctx, slidelimit.Call{})
				if err != nil {
					b.Error(err)
					return
				}
				// Redis's time of the decision orders the admissions as
				// Redis made them (one clock here), whenever this
				// goroutine runs next.
				admitted := p.Decision().Time.UnixNano()
				p.Finish(nil)
				mu.Lock()
				log = append(log, admission{arrived, admitted})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	c1 := sampleCPU(ctx, admin)
	calls := counter.Count() - calls0
	slices.SortFunc(log, func(x, y admission) int { return int(x.admitted - y.admitted) })
	// overtake[i]: how long after the earliest arrival among the calls
	// admitted after it call i arrived.
	overtake := make([]float64, len(log))
	minLater := int64(1<<63 - 1)
	for i := len(log) - 1; i >= 0; i-- {
		if d := log[i].arrived - minLater; d > 0 {
			overtake[i] = float64(d) / 1e6
		}
		minLater = min(minLater, log[i].arrived)
	}
	slices.Sort(overtake)
	n := float64(max(len(log), 1))
	b.ReportMetric(float64(calls)/n, "redis-calls/admit")
	if len(overtake) > 0 {
		b.ReportMetric(overtake[(len(overtake)-1)*99/100], "overtake-p99-ms")
		b.ReportMetric(overtake[len(overtake)-1], "overtake-max-ms")
	}
	if c0.ok && c1.ok {
		self, redis := c1.self-c0.self, c1.redis-c0.redis
		other := max(0, c1.machine-c0.machine-self-redis)
		b.ReportMetric(float64(self)/float64(time.Microsecond)/n, "go-µs/admit")
		b.ReportMetric(float64(redis)/float64(time.Microsecond)/n, "redis-µs/admit")
		b.ReportMetric(other.Seconds()/b.Elapsed().Seconds(), "other-cores")
	}
}
