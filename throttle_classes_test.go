package slidelimit_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestThrottleSharesConfig: a throttle takes share(CLASS):P% statements;
// shares adding up to more than 100% are a *ConfigError at the share that
// crosses it, and a route's group with a share is a *ConfigError at the
// statement.
func TestThrottleSharesConfig(t *testing.T) {
	t.Parallel()
	lim := faceLimiter(t)
	if _, err := lim.Throttle("ok", "global:20/s; share(critical):30%; share(bulk):70%"); err != nil {
		t.Fatalf("shares adding up to 100%%: %v", err)
	}
	const over = "global:20/s; share(a):60%; share(b):50%"
	_, err := lim.Throttle("over", over)
	var ce *slidelimit.ConfigError
	if !errors.As(err, &ce) || ce.Offset != strings.Index(over, "50%") || !strings.Contains(err.Error(), "add up to 110%") {
		t.Errorf("Throttle(%q) = %v, want a *ConfigError at the second share", over, err)
	}
	const route = "ip:5/s; share(a):30%"
	err = lim.Handle(http.NewServeMux(), "GET /x", http.NotFoundHandler(), route)
	if !errors.As(err, &ce) || ce.Offset != strings.Index(route, "share") || !strings.Contains(err.Error(), "Limiter.Throttle") {
		t.Errorf("Handle with %q = %v, want a *ConfigError at the share", route, err)
	}
}

// classBackends are the stores the classes' tests run on.
var classBackends = []struct {
	name   string
	client func(t *testing.T) engine.Client
}{
	{"miniredis", func(t *testing.T) engine.Client { return miniClient(t) }},
	{"redis", func(t *testing.T) engine.Client {
		srv := redistest.Start(t)
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return c
	}},
	{"cluster", func(t *testing.T) engine.Client { return redistest.StartCluster(t).Client(t) }},
}

// fleetOf returns throttle name of rulesText in n Limiters on client,
// standing for n processes of a fleet.
func fleetOf(t *testing.T, client engine.Client, n int, name, rulesText string) []*slidelimit.Throttle {
	t.Helper()
	prefix := randomPrefix(t)
	ths := make([]*slidelimit.Throttle, n)
	for i := range ths {
		var err error
		if ths[i], err = throttleLimiter(t, client, prefix).Throttle(name, rulesText); err != nil {
			t.Fatal(err)
		}
	}
	return ths
}

// admission is one admitted call of a load: its worker's label, when it
// was admitted (Redis's clock) and how long it waited.
type admission struct {
	label string
	at    time.Time
	wait  time.Duration
}

// worker is a caller of a load: it calls Wait with call on th again as
// soon as it is admitted, every pause after its last call when pause is
// not zero.
type worker struct {
	th    *slidelimit.Throttle
	call  slidelimit.Call
	label string
	pause time.Duration
}

// runLoad runs workers for d and returns their admissions from warm on,
// by admission time; the calls that end the run waiting are not counted,
// nor are their waits.
func runLoad(t *testing.T, workers []worker, warm, d time.Duration) []admission {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		mu  sync.Mutex
		out []admission
		wg  sync.WaitGroup
	)
	start := time.Now()
	for _, w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				asked := time.Now()
				p, err := w.th.Wait(ctx, w.call)
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				if time.Since(start) >= warm {
					mu.Lock()
					out = append(out, admission{label: w.label, at: p.Decision().Time, wait: time.Since(asked)})
					mu.Unlock()
				}
				p.Finish(nil)
				if w.pause > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(w.pause):
					}
				}
			}
		})
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b admission) int { return a.at.Compare(b.at) })
	return out
}

// byLabel counts admissions by label.
func byLabel(as []admission) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		m[a.label]++
	}
	return m
}

// p99 returns the 99th percentile of the waits of label's admissions.
func p99(as []admission, label string) time.Duration {
	var ws []time.Duration
	for _, a := range as {
		if a.label == label {
			ws = append(ws, a.wait)
		}
	}
	if len(ws) == 0 {
		return 0
	}
	slices.Sort(ws)
	return ws[(len(ws)*99)/100]
}

// TestThrottleShares: with share(critical):30% and both classes
// saturating three processes, critical gets at least 30% of the
// admissions less a small tolerance, and the windows stay used.
func TestThrottleShares(t *testing.T) {
	const limit, warm, run = 40, 500 * time.Millisecond, 2500 * time.Millisecond
	for _, b := range classBackends {
		t.Run(b.name, func(t *testing.T) {
			ths := fleetOf(t, b.client(t), 3, "api", "global:20/500ms; share(critical):30%")
			var ws []worker
			for _, th := range ths {
				for range 4 {
					ws = append(ws, worker{th: th, call: slidelimit.Call{Class: "critical"}, label: "critical"},
						worker{th: th, call: slidelimit.Call{Class: "batch"}, label: "batch"})
				}
			}
			as := runLoad(t, ws, warm, run)
			n := byLabel(as)
			total := n["critical"] + n["batch"]
			share := float64(n["critical"]) / float64(total)
			t.Logf("%d admissions: critical %.1f%% (p99 wait %v), batch p99 wait %v", total, 100*share, p99(as, "critical"), p99(as, "batch"))
			if share < 0.27 {
				t.Errorf("critical got %.1f%% of %d admissions, want at least 27%%", 100*share, total)
			}
			if want := 0.85 * limit * (run - warm).Seconds(); float64(total) < want {
				t.Errorf("%d admissions in %v, want at least %.0f (85%% of the limit)", total, run-warm, want)
			}
		})
	}
}

// TestThrottleSharesLent: a share its class leaves unused is lent. With
// batch saturating three processes and one critical caller calling now
// and then, batch uses the windows and the critical caller is admitted
// before batch's callers that queued before it.
func TestThrottleSharesLent(t *testing.T) {
	const limit, warm, run = 40, time.Second, 3 * time.Second
	for _, b := range classBackends {
		t.Run(b.name, func(t *testing.T) {
			ths := fleetOf(t, b.client(t), 3, "api", "global:20/500ms; share(critical):30%")
			var ws []worker
			for _, th := range ths {
				for range 8 {
					ws = append(ws, worker{th: th, call: slidelimit.Call{Class: "batch", Tenant: "t"}, label: "batch"})
				}
			}
			crit := worker{th: ths[0], call: slidelimit.Call{Class: "critical"}, label: "critical", pause: 300 * time.Millisecond}
			as := runLoad(t, append(ws, crit), warm, run)
			n := byLabel(as)
			total := n["critical"] + n["batch"]
			t.Logf("%d admissions: critical %d (p99 wait %v), batch %d (p99 wait %v)", total, n["critical"], p99(as, "critical"), n["batch"], p99(as, "batch"))
			if want := 0.85 * limit * (run - warm).Seconds(); float64(total) < want {
				t.Errorf("%d admissions in %v, want at least %.0f (85%% of the limit)", total, run-warm, want)
			}
			if n["critical"] < 2 {
				t.Errorf("the critical caller was admitted %d times in %v, want at least 2", n["critical"], run-warm)
			}
			// Its turn comes next, not behind batch's 24 callers.
			if c, b := p99(as, "critical"), p99(as, "batch"); c > b/2 {
				t.Errorf("the critical caller waited up to %v (p99), batch's callers %v: want at most half", c, b)
			}
		})
	}
}
