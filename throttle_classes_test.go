package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
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

// withPlain runs workers for d, and beside them the same workers on
// plain, a fleet of the same throttle without shares, their calls without
// class or tenant; it returns the admissions of both from warm on. The
// plain run is what the machine admits in arrival order under the same
// load: the classes' run must admit about as many.
func withPlain(t *testing.T, workers []worker, plain []*slidelimit.Throttle, warm, d time.Duration) (as, base []admission) {
	t.Helper()
	ps := make([]worker, len(workers))
	for i, w := range workers {
		ps[i] = worker{th: plain[i%len(plain)], label: w.label, pause: w.pause}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		base = runLoad(t, ps, warm, d)
	}()
	as = runLoad(t, workers, warm, d)
	<-done
	return as, base
}

// used returns the part of the windows' room that as used in the three
// windows from its first admission on, for a throttle declared to admit
// limit calls per period. Its windows count each call the default
// transit bound longer (docs/throttle.md, Transit bound): they admit at
// most 3 × limit in any three of their periods, and a saturated throttle
// that many, whether its admissions come in bursts or paced. (Over three
// declared periods a throttle in bursts fits a third burst, a paced one
// not all of a third window's calls.)
func used(as []admission, limit int, period time.Duration) float64 {
	if len(as) == 0 {
		return 0
	}
	span := 3 * (period + 50*time.Millisecond) // WithTransitBound's default
	n := 0
	for _, a := range as {
		if a.at.Before(as[0].at.Add(span)) {
			n++
		}
	}
	return float64(n) / float64(3*limit)
}

// atLeastPlain reports a run that used less than 90% of the room the
// plain run beside it used, or less than 60% of it.
func atLeastPlain(t *testing.T, as, base []admission, limit int, period time.Duration) {
	t.Helper()
	u, b := used(as, limit, period), used(base, limit, period)
	t.Logf("%.0f%% of the room used, %.0f%% in arrival order beside it", 100*u, 100*b)
	if u < 0.9*b || u < 0.6 {
		t.Errorf("%.0f%% of the room used, %.0f%% in arrival order beside it: want at least 90%% of that and 60%%", 100*u, 100*b)
	}
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
// admissions less a small tolerance, and the windows are used as much as
// in arrival order under the same load.
func TestThrottleShares(t *testing.T) {
	const warm, run = 500 * time.Millisecond, 2500 * time.Millisecond
	for _, b := range classBackends {
		t.Run(b.name, func(t *testing.T) {
			client := b.client(t)
			ths := fleetOf(t, client, 3, "api", "global:40/500ms; share(critical):30%")
			plain := fleetOf(t, client, 3, "api", "global:40/500ms")
			var ws []worker
			for _, th := range ths {
				for range 4 {
					ws = append(ws, worker{th: th, call: slidelimit.Call{Class: "critical"}, label: "critical"},
						worker{th: th, call: slidelimit.Call{Class: "batch"}, label: "batch"})
				}
			}
			as, base := withPlain(t, ws, plain, warm, run)
			n := byLabel(as)
			total := n["critical"] + n["batch"]
			share := float64(n["critical"]) / float64(total)
			t.Logf("%d admissions: critical %.1f%% (p99 wait %v), batch p99 wait %v", total, 100*share, p99(as, "critical"), p99(as, "batch"))
			if share < 0.27 {
				t.Errorf("critical got %.1f%% of %d admissions, want at least 27%%", 100*share, total)
			}
			atLeastPlain(t, as, base, 40, 500*time.Millisecond)
		})
	}
}

// TestThrottleSharesLent: a share its class leaves unused is lent. With
// batch saturating three processes and one critical caller calling now
// and then, batch uses the windows and the critical caller is admitted
// before batch's callers that queued before it.
func TestThrottleSharesLent(t *testing.T) {
	const warm, run = time.Second, 3 * time.Second
	for _, b := range classBackends {
		t.Run(b.name, func(t *testing.T) {
			client := b.client(t)
			ths := fleetOf(t, client, 3, "api", "global:20/500ms; share(critical):30%")
			plain := fleetOf(t, client, 3, "api", "global:20/500ms")
			var ws []worker
			for _, th := range ths {
				for range 8 {
					ws = append(ws, worker{th: th, call: slidelimit.Call{Class: "batch", Tenant: "t"}, label: "batch"})
				}
			}
			crit := worker{th: ths[0], call: slidelimit.Call{Class: "critical"}, label: "critical", pause: 300 * time.Millisecond}
			as, base := withPlain(t, append(ws, crit), plain, warm, run)
			n := byLabel(as)
			total := n["critical"] + n["batch"]
			t.Logf("%d admissions: critical %d (p99 wait %v), batch %d (p99 wait %v)", total, n["critical"], p99(as, "critical"), n["batch"], p99(as, "batch"))
			atLeastPlain(t, as, base, 20, 500*time.Millisecond)
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

// jain returns Jain's fairness index of counts: 1 when all are equal.
func jain(counts map[string]int) float64 {
	var s, s2 float64
	for _, c := range counts {
		s += float64(c)
		s2 += float64(c) * float64(c)
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(counts)) * s2)
}

// TestThrottleTenantsRoundRobin: ten tenants wait in two processes, one
// of them with ten times the waiters of each other: every tenant gets
// about a tenth of the admissions, from the first. Ten windows: in runs
// of five, a tenant now and then got 4 to 10 admissions more than the
// others' 20 (not traced; docs/throttle.md, Classes and tenants).
func TestThrottleTenantsRoundRobin(t *testing.T) {
	const run = 5 * time.Second
	for _, b := range classBackends {
		t.Run(b.name, func(t *testing.T) {
			ths := fleetOf(t, b.client(t), 2, "api", "global:40/500ms")
			var ws []worker
			for _, th := range ths {
				for i := range 10 {
					n := 1
					if i == 0 {
						n = 10
					}
					tenant := fmt.Sprint("tenant", i)
					for range n {
						ws = append(ws, worker{th: th, call: slidelimit.Call{Tenant: tenant}, label: tenant})
					}
				}
			}
			n := byLabel(runLoad(t, ws, 0, run))
			total := 0
			for _, c := range n {
				total += c
			}
			mean := float64(total) / 10
			t.Logf("%d admissions, Jain index %.3f: %v", total, jain(n), n)
			for tenant, c := range n {
				if d := float64(c)/mean - 1; d > 0.15 || d < -0.15 {
					t.Errorf("%s was admitted %d times, %+.0f%% off the mean %.1f", tenant, c, 100*d, mean)
				}
			}
			if len(n) != 10 || jain(n) < 0.95 {
				t.Errorf("Jain index %.3f over %d tenants, want at least 0.95 over 10", jain(n), len(n))
			}
		})
	}
}

// TestThrottleTenantFIFO: within a tenant, callers are admitted in the
// order they arrived, across processes, while another tenant's callers
// take their turns between them.
func TestThrottleTenantFIFO(t *testing.T) {
	ths := fleetOf(t, miniClient(t), 2, "api", "global:1/100ms")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := ths[0].Wait(ctx, slidelimit.Call{Tenant: "a"}) // fills the window
	if err != nil {
		t.Fatal(err)
	}
	p.Finish(nil)
	const callers = 12
	type result struct {
		tenant   string
		arrived  time.Time
		admitted time.Time
	}
	results := make([]result, callers)
	var wg sync.WaitGroup
	for i := range callers {
		results[i].tenant = []string{"a", "a", "b"}[i%3]
		wg.Go(func() {
			results[i].arrived = time.Now()
			p, err := ths[i%2].Wait(ctx, slidelimit.Call{Tenant: results[i].tenant})
			if err != nil {
				t.Error(err)
				return
			}
			results[i].admitted = p.Decision().Time
			p.Finish(nil)
		})
		time.Sleep(40 * time.Millisecond)
	}
	wg.Wait()
	// A caller may pass one of its tenant that arrived less than a
	// scheduling delay before it, never one that arrived well before.
	const slack = 20 * time.Millisecond
	for _, r := range results {
		for _, s := range results {
			if r.tenant == s.tenant && s.arrived.Sub(r.arrived) > slack && s.admitted.Before(r.admitted) {
				t.Errorf("tenant %s: a call that arrived at +%v was admitted before one that arrived at +%v", r.tenant,
					s.arrived.Sub(results[0].arrived).Round(time.Millisecond), r.arrived.Sub(results[0].arrived).Round(time.Millisecond))
			}
		}
	}
}

// TestThrottleTenantsMixed: callers without a tenant in a lane where
// tenants wait are served as tenant "": a tenant with many waiters does
// not starve them, nor do they starve the tenants.
func TestThrottleTenantsMixed(t *testing.T) {
	ths := fleetOf(t, miniClient(t), 2, "api", "global:40/500ms")
	var ws []worker
	for _, th := range ths {
		for range 10 {
			ws = append(ws, worker{th: th, call: slidelimit.Call{Tenant: "noisy"}, label: "noisy"})
		}
		for range 2 {
			ws = append(ws, worker{th: th, call: slidelimit.Call{Tenant: "quiet"}, label: "quiet"},
				worker{th: th, label: "none"})
		}
	}
	n := byLabel(runLoad(t, ws, time.Second, 3*time.Second))
	t.Logf("%v", n)
	mean := float64(n["noisy"]+n["quiet"]+n["none"]) / 3
	for _, l := range []string{"noisy", "quiet", "none"} {
		if float64(n[l]) < 0.5*mean {
			t.Errorf("%s was admitted %d times, below half the mean %.1f", l, n[l], mean)
		}
	}
}

// TestThrottleTenantGaveUp: a tenant whose first waiters give up keeps
// its place in the rounds. Tenants a and b queue five waiters each, in
// turn; a's first two give up; the next four admissions alternate, two
// each (with the gave up turns spent, b took its first two at once).
func TestThrottleTenantGaveUp(t *testing.T) {
	ths := fleetOf(t, miniClient(t), 1, "api", "global:1/150ms")
	th := ths[0]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := th.Wait(ctx, slidelimit.Call{Tenant: "a"}) // fills the window
	if err != nil {
		t.Fatal(err)
	}
	p.Finish(nil)
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	var quit []context.CancelFunc
	for i := range 10 {
		tenant := []string{"a", "b"}[i%2]
		wctx, wcancel := context.WithCancel(ctx)
		if tenant == "a" && len(quit) < 2 {
			quit = append(quit, wcancel)
		} else {
			defer wcancel()
		}
		wg.Go(func() {
			p, err := th.Wait(wctx, slidelimit.Call{Tenant: tenant})
			if err != nil {
				return
			}
			mu.Lock()
			order = append(order, tenant)
			mu.Unlock()
			p.Finish(nil)
		})
		time.Sleep(3 * time.Millisecond)
	}
	for _, q := range quit {
		q()
	}
	wg.Wait()
	if len(order) != 8 {
		t.Fatalf("%d admitted, want 8", len(order))
	}
	n := map[string]int{}
	for _, tenant := range order[:4] {
		n[tenant]++
	}
	if n["a"] != 2 || n["b"] != 2 {
		t.Errorf("the first four admissions after a's waiters gave up: %v, want two each", order[:4])
	}
}

// TestThrottleTenantsJoinLate: tenants that join a class whose heavy
// tenant queued its calls alone take turns with it at once (two
// processes): while a tenant's waiter waits, no other tenant of its class
// is admitted twice in a row. Before tags were two-level, the heavy
// tenant's calls, tagged one increment apart while it waited alone, went
// two and three in a row past the later tenants' waiters.
func TestThrottleTenantsJoinLate(t *testing.T) {
	ths := fleetOf(t, miniClient(t), 2, "api", "global:1/100ms; share(x):50%")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := ths[0].Wait(ctx, slidelimit.Call{Tenant: "h"}) // fills the window
	if err != nil {
		t.Fatal(err)
	}
	p.Finish(nil)
	type admission struct {
		tenant     string
		queued, at time.Time
	}
	var mu sync.Mutex
	var got []admission
	var wg sync.WaitGroup
	wait := func(th *slidelimit.Throttle, tenant string) {
		queued := time.Now()
		wg.Go(func() {
			p, err := th.Wait(ctx, slidelimit.Call{Tenant: tenant})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got = append(got, admission{tenant, queued, time.Now()})
			mu.Unlock()
			p.Finish(nil)
		})
		time.Sleep(2 * time.Millisecond)
	}
	for range 6 {
		wait(ths[0], "h")
	}
	time.Sleep(30 * time.Millisecond) // h's calls are tagged alone
	for range 3 {
		wait(ths[1], "a")
		wait(ths[1], "b")
	}
	wg.Wait()
	slices.SortFunc(got, func(x, y admission) int { return x.at.Compare(y.at) })
	for i := 1; i < len(got); i++ {
		prev, cur := got[i-1], got[i]
		if prev.tenant != cur.tenant {
			continue
		}
		// Another tenant's waiter queued well before prev's admission
		// and admitted after cur's was passed twice.
		for _, o := range got[i+1:] {
			if o.tenant != cur.tenant && o.queued.Before(prev.at.Add(-50*time.Millisecond)) {
				t.Errorf("tenant %s admitted twice in a row (at %d and %d of %d) while %s's waiter queued before waited",
					cur.tenant, i-1, i, len(got), o.tenant)
				break
			}
		}
	}
}
