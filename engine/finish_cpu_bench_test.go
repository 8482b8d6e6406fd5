package engine

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// BenchmarkFinishRedisCPU measures what the download group (downloadGroup)
// costs Redis per request, 64 callers on 2,000 subjects admitted once
// before (a request is mostly its key's newest entry when it is settled)
// or on one (up to 63 later entries): each iteration admits 64 requests at
// once, then finishes them at once (settled to half the estimate, slot
// released), and reads INFO commandstats and INFO cpu around each half. It reports, per admission and per finish, the time Redis spent in
// script calls (INFO commandstats, which includes the commands they run;
// wall time, so a loaded machine inflates it) and the server's CPU time
// (INFO cpu, user and system: its networking too), and the commands a
// finish runs inside the script (TIME, ZRANGE, ZREM, ZADD, ...) per
// request.
func BenchmarkFinishRedisCPU(b *testing.B) {
	for _, subjects := range []int{2_000, 1} {
		b.Run("subjects="+strconv.Itoa(subjects), func(b *testing.B) { benchFinishRedisCPU(b, subjects) })
	}
}

func benchFinishRedisCPU(b *testing.B, subjects int) {
	const callers = 64
	s := redistest.Start(b)
	ctx := context.Background()
	rc := s.Client()
	reqs := make([]Request, subjects)
	for i := range reqs {
		reqs[i] = downloadRequest(b, "u"+strconv.Itoa(i), 1<<20)
		reqs[i].Checks[0].Windows[1].Limit = 1e6
	}
	out := Outcome{Actual: []int64{-1, 512 << 10}}
	e := newEngine(b, rc, WithKeyPrefix(redistest.Prefix(b)))
	for i := 0; i < len(reqs); i += callers {
		var wg sync.WaitGroup
		for c := range min(callers, len(reqs)-i) {
			wg.Go(func() {
				d, err := e.Allow(ctx, reqs[i+c])
				if err != nil || !d.Allowed {
					b.Error(d, err)
				}
				_ = e.Finish(ctx, d, out)
			})
		}
		wg.Wait()
	}
	admit, finish := cmdStats{}, cmdStats{}
	ds := make([]Decision, callers)
	i := 0
	for b.Loop() {
		before := readCmdStats(b, rc)
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				d, err := e.Allow(ctx, reqs[(i+c)%len(reqs)])
				if err != nil || !d.Allowed {
					b.Error(d, err)
				}
				ds[c] = d
			})
		}
		wg.Wait()
		mid := readCmdStats(b, rc)
		for c := range callers {
			wg.Go(func() {
				if err := e.Finish(ctx, ds[c], out); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		after := readCmdStats(b, rc)
		admit.add(mid, before)
		finish.add(after, mid)
		i += callers
	}
	n := float64(i)
	// The script runs as FCALL, or EVALSHA where the server cannot.
	b.ReportMetric(float64(admit["evalsha"].usec+admit["fcall"].usec)/n, "script-µs/admit")
	b.ReportMetric(float64(finish["evalsha"].usec+finish["fcall"].usec)/n, "script-µs/finish")
	b.ReportMetric(float64(admit["cpu"].usec)/n, "cpu-µs/admit")
	b.ReportMetric(float64(finish["cpu"].usec)/n, "cpu-µs/finish")
	for _, cmd := range []string{"time", "zrange", "zpopmax", "zrem", "zadd", "hget", "hincrby", "publish"} {
		if c := finish[cmd].calls; c > 0 {
			b.ReportMetric(float64(c)/n, cmd+"/finish")
		}
	}
}

type cmdStat struct{ calls, usec int64 }

// cmdStats maps a command's name to its INFO commandstats counters.
type cmdStats map[string]cmdStat

// add adds the difference a - b to s.
func (s cmdStats) add(a, b cmdStats) {
	for k, v := range a {
		w := b[k]
		x := s[k]
		x.calls += v.calls - w.calls
		x.usec += v.usec - w.usec
		s[k] = x
	}
}

func readCmdStats(tb testing.TB, rc *redis.Client) cmdStats {
	info, err := rc.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	s := cmdStats{}
	for line := range strings.Lines(info) {
		if cpu, ok := strings.CutPrefix(line, "used_cpu_"); ok {
			// The server's CPU time, user and system, in the "cpu" entry.
			_, sec, _ := strings.Cut(strings.TrimSpace(cpu), ":")
			if f, err := strconv.ParseFloat(sec, 64); err == nil && !strings.Contains(cpu, "children") && !strings.Contains(cpu, "main_thread") {
				x := s["cpu"]
				x.usec += int64(f * 1e6)
				s["cpu"] = x
			}
			continue
		}
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		calls, rest, _ := strings.Cut(rest, ",usec=")
		usec, _, _ := strings.Cut(rest, ",")
		c, _ := strconv.ParseInt(calls, 10, 64)
		u, _ := strconv.ParseInt(usec, 10, 64)
		s[name] = cmdStat{c, u}
	}
	return s
}
