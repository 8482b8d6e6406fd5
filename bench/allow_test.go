package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// benchAddr is the address of the redis-server started by TestMain.
var benchAddr string

// TestMain starts an own redis-server for the benchmarks of this file and
// stops it at the end. Set BENCH_REDIS_SERVER to use another binary.
func TestMain(m *testing.M) {
	bin := os.Getenv("BENCH_REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	srv, err := startRedis(bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	atCleanup(srv.Stop)
	benchAddr = srv.Addr
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// issue3Callers is the number of concurrent callers of the issue #3
// comparison; with SetParallelism(issue3Callers/GOMAXPROCS) RunParallel
// starts that many goroutines.
const issue3Callers = 64

// issue3Keys is the number of distinct keys of the issue #3 comparison.
const issue3Keys = 10_000

// BenchmarkAllow is the comparison of GitHub issue #3: 64 concurrent
// callers deciding on 10,000 keys round-robin, every decision allowed,
// slidelimit with a 2-window group against redis_rate v10 on the same
// redis-server in the same run. It reports decisions/s next to the usual
// ns/op and allocs/op (allocations per decision, with -benchmem), and the
// CPU time per decision of redis-server (redis-µs/op) and of this process
// (go-µs/op), and how many cores other processes on the machine took
// meanwhile (other-cores): on a shared machine, a run with other-cores
// well above zero is disturbed.
func BenchmarkAllow(b *testing.B) {
	for _, lib := range issue3Libraries() {
		b.Run(lib.Name, func(b *testing.B) { benchAllow(b, lib) })
	}
}

// issue3Libraries returns the libraries of the issue #3 comparison.
func issue3Libraries() []library {
	var libs []library
	for _, l := range allLibraries() {
		if l.Name == slidelimit2W || l.Name == "redis_rate/v10" {
			libs = append(libs, l)
		}
	}
	return libs
}

func benchAllow(b *testing.B, lib library) {
	ctx := context.Background()
	rdb := newClient(benchAddr, issue3Callers)
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	c := benchCase{Name: fmt.Sprintf("allow-%dkeys", issue3Keys), Keys: issue3Keys}
	setup, err := lib.Setup(ctx, rdb, c)
	if err != nil {
		b.Fatal(err)
	}
	defer setup.Close()
	keys := make([]string, c.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%06d", i)
	}
	warm(b, ctx, rdb)

	var ids, denied, errs atomic.Int64
	var firstErr atomic.Value
	b.SetParallelism(max(1, issue3Callers/parallelismDivisor()))
	b.ReportAllocs()
	c0 := sampleCPU(ctx, rdb)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		id := int(ids.Add(1) - 1)
		decide := setup.NewCaller()
		next := id * 7919 % len(keys)
		for pb.Next() {
			ok, err := decide(ctx, keys[next])
			if next++; next == len(keys) {
				next = 0
			}
			switch {
			case err != nil:
				if errs.Add(1) == 1 {
					firstErr.Store(err)
				}
			case !ok:
				denied.Add(1)
			}
		}
	})
	b.StopTimer()
	c1 := sampleCPU(ctx, rdb)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	if c0.ok && c1.ok {
		self, redis := c1.self-c0.self, c1.redis-c0.redis
		other := max(0, c1.machine-c0.machine-self-redis)
		b.ReportMetric(float64(redis)/float64(time.Microsecond)/float64(b.N), "redis-µs/op")
		b.ReportMetric(float64(self)/float64(time.Microsecond)/float64(b.N), "go-µs/op")
		b.ReportMetric(other.Seconds()/b.Elapsed().Seconds(), "other-cores")
	}
	if n := errs.Load(); n > 0 {
		b.Errorf("%d of %d decisions failed, first: %v", n, b.N, firstErr.Load())
	}
	if n := denied.Load(); n > 0 {
		b.Errorf("%d of %d decisions denied; the limits should allow all", n, b.N)
	}
}

// parallelismDivisor is GOMAXPROCS: RunParallel starts
// parallelism*GOMAXPROCS goroutines.
func parallelismDivisor() int {
	return max(1, runtime.GOMAXPROCS(0))
}

// warm opens the pool's connections before the timer starts, so that the
// first iterations do not pay for dialing.
func warm(b *testing.B, ctx context.Context, rdb *redis.Client) {
	b.Helper()
	done := make(chan error, issue3Callers)
	for range issue3Callers {
		go func() { done <- rdb.Ping(ctx).Err() }()
	}
	for range issue3Callers {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
