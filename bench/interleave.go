package main

import (
	"context"
	"fmt"
	"time"
)

// interleaveProbe runs the libraries named in names on the many-keys case
// with one caller that alternates between them, one decision each in turn
// on the same subject, and prints each one's mean and median latency per
// round. Run in turns, both see the same load on the machine from one
// decision to the next, so their ratio holds on a machine too busy for
// the table's runs (one library after the other) to compare: at one
// caller a library's decisions/s is the inverse of its mean latency.
func interleaveProbe(ctx context.Context, addr string, o options, names []string) error {
	var libs []library
	for _, name := range names {
		found := false
		for _, l := range runLibraries(true) {
			if l.Name == name {
				libs, found = append(libs, l), true
				break
			}
		}
		if !found {
			return fmt.Errorf("no library %q", name)
		}
	}
	c := benchCase{Name: fmt.Sprintf("allow-%dkeys", o.keys), Keys: o.keys}
	keys := make([]string, c.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%06d", i)
	}
	fmt.Printf("One caller alternating between the libraries, one decision each per subject, %s, %v warm-up and %v measured per round; FLUSHALL before each round.\n\n", c.Name, o.warmup, o.duration)
	fmt.Println("| round | library | decisions | mean | p50 | p99 | mean ÷ " + names[0] + "'s |")
	fmt.Println("|---:|---|---:|---:|---:|---:|---:|")
	for round := 1; round <= o.rounds; round++ {
		rdb := newClient(addr, o.poolSize)
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			rdb.Close()
			return err
		}
		decide := make([]decideFunc, len(libs))
		var closers []func()
		closeAll := func() {
			for _, f := range closers {
				f()
			}
			rdb.Close()
		}
		for i, l := range libs {
			setup, err := l.Setup(ctx, rdb, c)
			if err != nil {
				closeAll()
				return fmt.Errorf("%s: %w", l.Name, err)
			}
			closers = append(closers, setup.Close)
			decide[i] = setup.NewCaller()
		}
		hs := make([]hist, len(libs))
		sums := make([]time.Duration, len(libs))
		next := 0
		for phase, d := range []time.Duration{o.warmup, o.duration} {
			end := time.Now().Add(d)
			for time.Now().Before(end) && ctx.Err() == nil {
				key := keys[next]
				if next++; next == len(keys) {
					next = 0
				}
				for i, f := range decide {
					t0 := time.Now()
					ok, err := f(ctx, key)
					lat := time.Since(t0)
					if err != nil || !ok {
						closeAll()
						return fmt.Errorf("%s: allowed=%v, err=%v", libs[i].Name, ok, err)
					}
					if phase == 1 {
						hs[i].record(lat)
						sums[i] += lat
					}
				}
			}
		}
		closeAll()
		for i := range libs {
			mean := sums[i] / time.Duration(max(hs[i].n, 1))
			fmt.Printf("| %d | %s | %d | %s | %s | %s | %.2f |\n", round, libs[i].Name, hs[i].n, fmtDur(mean),
				fmtDur(hs[i].quantile(0.5)), fmtDur(hs[i].quantile(0.99)), float64(sums[i])/float64(sums[0]))
		}
	}
	return ctx.Err()
}
