package slidelimit

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/faults"
	"github.com/slidelimit/slidelimit/internal/throttle"
	"github.com/slidelimit/slidelimit/middleware"
)

// The throttle's fault harness (TestThrottleFaults): generated throttle
// histories (faults.GenerateThrottle) run in real time against each
// backend, with several Limiters standing for processes, and checked
// against faults.CheckThrottle. See docs/operations.md, "The throttle in
// the fault harness".
var (
	throttleFaultsSeed     = flag.Uint64("throttle.seed", 0, "run TestThrottleFaults on this one seed (also "+throttleSeedEnv+")")
	throttleFaultsDuration = flag.Duration("throttle.duration", 0, "run TestThrottleFaults's random histories for this long per backend (also "+throttleDurationEnv+")")
)

// The environment's equivalents of the flags, for go test ./..., where
// the other packages know no such flag.
const (
	throttleSeedEnv     = "SLIDELIMIT_THROTTLE_SEED"
	throttleDurationEnv = "SLIDELIMIT_THROTTLE_DURATION"
)

// throttleFaultsBudget is the number of seeded histories each backend runs
// in CI, and throttleFaultsTime the time after which no further seed
// starts: a history takes 3 to 8 s, so a backend's share stays within
// about 30 s on a loaded machine.
var throttleFaultsBudget = map[string]int{"miniredis": 4, "redis": 3, "cluster": 3}

const throttleFaultsTime = 25 * time.Second

// throttleRegressions holds every throttle scenario that ever failed, as
// <backend>-<seed>.json, run before the budget's seeds.
const throttleRegressions = "testdata/throttle-faults"

// throttleOpen holds the scenarios that found a hole not closed yet, as
// <backend>-<seed>.json, with what they find in throttleOpen/README.md:
// CI skips them; SLIDELIMIT_THROTTLE_OPEN=1 runs them first. Once the
// hole is closed they move to throttleRegressions.
const (
	throttleOpen    = "testdata/throttle-faults-open"
	throttleOpenEnv = "SLIDELIMIT_THROTTLE_OPEN"
)

// throttleOpenSeeds are the budget's seeds that find an open hole, listed
// in throttleOpen/README.md: CI skips them unless SLIDELIMIT_THROTTLE_OPEN=1.
var throttleOpenSeeds = map[string][]uint64{"cluster": {3}}

// The harness's settings: the engine's slot lease (short, so that a dead
// process's slots free within a history), how long a caller waits at
// most, and the engine's wait after a refusal for a full in-flight window
// (engine's slotRetry).
const (
	harnessLease     = time.Second
	harnessPatience  = 4 * time.Second
	harnessSlotRetry = time.Second
)

// harnessSkew is how close two arrivals may be and still be in no known
// order (faults.ThrottleHistory.Skew). Each process stamps its callers on
// its estimate of the Redis clock, off by up to half a round trip, and
// stamps them after the harness noted them; with -race on a loaded
// machine the processes' stamps of one burst were measured 1 ms apart from
// the real order, and a stamp 2.3 ms after the harness's note.
const harnessSkew = 5 * time.Millisecond

// harnessMaxHold is the processes' WithMaxHold: a Permit never finished
// holds its slots that long (faults.ThrottleHistory.MaxHold).
const harnessMaxHold = 1500 * time.Millisecond

// harnessTransit is the processes' transit bound (WithTransitBound). Each
// call's transit is drawn in [0, harnessTransit): the model counts it at
// the upstream at its decision plus that transit.
const harnessTransit = 50 * time.Millisecond

func TestThrottleFaults(t *testing.T) {
	// go-redis logs every refused dial of a killed server.
	logging.Disable()
	// The backends share nothing (each its own store and prefixes); a
	// history mostly waits on timers, so they run side by side.
	t.Run("miniredis", func(t *testing.T) { t.Parallel(); runThrottleFaults(t, faults.MiniredisBackend(t)) })
	t.Run("redis", func(t *testing.T) { t.Parallel(); runThrottleFaults(t, faults.RedisBackend(t)) })
	t.Run("cluster", func(t *testing.T) { t.Parallel(); runThrottleFaults(t, faults.ClusterBackend(t, false)) })
}

// throttleSettings returns the one seed to run (0: none) and how long to
// run random seeds (0: the budget), from the flags or the environment.
func throttleSettings(t *testing.T) (uint64, time.Duration) {
	seed, d := *throttleFaultsSeed, *throttleFaultsDuration
	if v := os.Getenv(throttleSeedEnv); v != "" && seed == 0 {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", throttleSeedEnv, v, err)
		}
		seed = n
	}
	if v := os.Getenv(throttleDurationEnv); v != "" && d == 0 {
		x, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", throttleDurationEnv, v, err)
		}
		d = x
	}
	return seed, d
}

// throttleScenarios returns a backend's regression scenarios then its budget's
// seeds, or the one seed asked for.
func throttleScenarios(t *testing.T, b *faults.Backend, seed uint64) []faults.ThrottleScenario {
	if seed != 0 {
		return []faults.ThrottleScenario{faults.GenerateThrottle(seed, b.Caps)}
	}
	files, err := filepath.Glob(filepath.Join(throttleRegressions, b.Name+"-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(throttleOpenEnv) == "1" {
		open, err := filepath.Glob(filepath.Join(throttleOpen, b.Name+"-*.json"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(open, files...)
	}
	var scenarios []faults.ThrottleScenario
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var p faults.ThrottleScenario
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		scenarios = append(scenarios, p)
	}
	for i := range throttleFaultsBudget[b.Name] {
		seed := uint64(i + 1)
		if slices.Contains(throttleOpenSeeds[b.Name], seed) && os.Getenv(throttleOpenEnv) != "1" {
			t.Logf("%s: seed %d set aside (%s)", b.Name, seed, throttleOpen)
			continue
		}
		scenarios = append(scenarios, faults.GenerateThrottle(seed, b.Caps))
	}
	return scenarios
}

func runThrottleFaults(t *testing.T, b *faults.Backend) {
	if b.Mini != nil {
		// miniredis ends a key's expiry only when its clock is moved:
		// move it with the real one before each command, as Redis's runs.
		// (A ticker moved by the time since its last tick aged keys made
		// in between: starved for 500 ms, it expired a window's key early
		// and the next call was admitted over the limit.)
		b.Mini.ClockTTL(true)
		defer b.Mini.ClockTTL(false)
	}
	seed, endless := throttleSettings(t)
	open := os.Getenv(throttleOpenEnv) == "1" // every scenario runs, whatever the time
	bound := harnessBound(t, b)
	scenarios := throttleScenarios(t, b, seed)
	began := time.Now()
	next := uint64(time.Now().UnixNano())
	var histories, calls int
	var longest time.Duration
	var which string
	failed := 0
	for i := 0; ; i++ {
		var p faults.ThrottleScenario
		switch {
		case endless > 0 && time.Since(began) < endless:
			if i < len(scenarios) {
				p = scenarios[i]
			} else {
				next = next*6364136223846793005 + 1442695040888963407
				p = faults.GenerateThrottle(next>>1, b.Caps)
			}
		case i < len(scenarios) && (seed != 0 || open || time.Since(began) < throttleFaultsTime):
			p = scenarios[i]
		default:
			t.Logf("%s: %d histories, %d calls in %v; an oldest waiter with room waited at most %v (bound %v; %s)",
				b.Name, histories, calls, time.Since(began).Round(time.Millisecond), longest, bound, which)
			return
		}
		h, rep, errs := runThrottleScenario(t, b, p, bound)
		histories++
		calls += len(h.Calls)
		if rep.LongestIdle > longest {
			longest, which = rep.LongestIdle, fmt.Sprintf("seed %d, %s", p.Seed, rep.Longest)
		}
		logOpen(t, b.Name, p.Seed, rep)
		vs := throttleFailures(rep, errs)
		if len(vs) == 0 {
			continue
		}
		if failed++; failed > 1 {
			t.Errorf("%s: seed %d failed too (replay: %s=%d go test -run 'TestThrottleFaults/%s' .):\n  %s\nplan:\n%vhistory:\n%s",
				b.Name, p.Seed, throttleSeedEnv, p.Seed, b.Name, strings.Join(vs, "\n  "), p, historyString(h))
			continue
		}
		// Each try runs a history of seconds: at most 8, for at most 60 s.
		deadline := time.Now().Add(60 * time.Second)
		shrunk := faults.ShrinkThrottle(p, 8, func(q faults.ThrottleScenario) bool {
			if time.Now().After(deadline) {
				return false
			}
			_, rep, errs := runThrottleScenario(t, b, q, bound)
			return len(throttleFailures(rep, errs)) > 0
		})
		keep := shrunk
		sh, srep, serrs := runThrottleScenario(t, b, shrunk, bound)
		svs := throttleFailures(srep, serrs)
		if len(svs) == 0 {
			keep = p // the shrunk scenario passed this time: keep the whole one
		}
		js, _ := json.MarshalIndent(keep, "", "\t")
		t.Errorf("%s: seed %d failed (replay: %s=%d go test -run 'TestThrottleFaults/%s' .):\n  %s\nplan:\n%vhistory:\n%s\nshrunk scenario:\n%vits violations:\n  %s\nits history:\n%s\nkeep it as %s/%s-%d.json:\n%s",
			b.Name, p.Seed, throttleSeedEnv, p.Seed, b.Name, strings.Join(vs, "\n  "), p, historyString(h),
			shrunk, strings.Join(svs, "\n  "), historyString(sh), throttleRegressions, b.Name, p.Seed, js)
	}
}

// throttleOpenProperties are the properties of a history that find an
// open hole, listed in throttleOpen/README.md: CI logs their violations
// and fails on the others, unless SLIDELIMIT_THROTTLE_OPEN=1. share was
// closed (the README's Closed section); turns breaches are rare now, not
// gone.
var throttleOpenProperties = []string{"turns"}

func throttleFailures(rep faults.ThrottleReport, errs []string) []string {
	out := slices.Clone(errs)
	for _, v := range rep.Violations {
		if slices.Contains(throttleOpenProperties, v.Property) && os.Getenv(throttleOpenEnv) != "1" {
			continue
		}
		out = append(out, v.String())
	}
	return out
}

// logOpen logs the violations of the open properties.
func logOpen(t *testing.T, name string, seed uint64, rep faults.ThrottleReport) {
	for _, v := range rep.Violations {
		if slices.Contains(throttleOpenProperties, v.Property) && os.Getenv(throttleOpenEnv) != "1" {
			t.Logf("%s: seed %d, open (%s): %v", name, seed, throttleOpen, v)
		}
	}
}

func historyString(h faults.ThrottleHistory) string {
	var b strings.Builder
	for _, c := range h.Calls {
		fmt.Fprintf(&b, "  %v\n", c)
	}
	for _, f := range h.Faults {
		fmt.Fprintf(&b, "  fault %s from %v to %v\n", f.Why, f.From, f.To)
	}
	for _, l := range h.Losses {
		fmt.Fprintf(&b, "  loss at %v\n", l)
	}
	for _, bl := range h.Blocks {
		fmt.Fprintf(&b, "  block of k%d from %v to %v\n", bl.Key, bl.From, bl.To)
	}
	return b.String()
}

// harnessBound is the idle property's bound on b: 500 ms, or ten of the
// backend's median decisions on a machine slow enough to need more, at
// most 1 s (below the fleet's 1.5 s renewal and 3 s lease).
func harnessBound(t *testing.T, b *faults.Backend) time.Duration {
	c := b.Client()
	defer c.Close()
	lim, err := New(c, WithKeyPrefix(harnessPrefix()), WithLogger(slog.New(slog.DiscardHandler)), WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	th, err := lim.Throttle("calibrate", "global:100000/1000ms")
	if err != nil {
		t.Fatal(err)
	}
	var ls []time.Duration
	for range 15 {
		start := time.Now()
		p, err := th.Wait(context.Background(), Call{})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, time.Since(start))
		p.Finish(nil)
	}
	slices.Sort(ls)
	return min(max(500*time.Millisecond, 10*ls[len(ls)/2]), time.Second)
}

var harnessSeq struct {
	sync.Mutex
	n int
}

func harnessPrefix() string {
	harnessSeq.Lock()
	defer harnessSeq.Unlock()
	harnessSeq.n++
	return fmt.Sprintf("tf%d-%d:", time.Now().UnixNano(), harnessSeq.n)
}

// throttleRun is one throttle history being run.
type throttleRun struct {
	b      *faults.Backend
	p      faults.ThrottleScenario
	prefix string
	origin time.Time
	keyed  bool
	cost   string

	mu      sync.Mutex
	hist    faults.ThrottleHistory
	procs   []*harnessProc // by the scenario's process number: the current incarnation
	all     []*harnessProc
	nextPID int
	rng     *rand.Rand // the calls' transits
	errs    []string
	byG     map[uint64]*harnessCall // the calls waiting now, by goroutine
	kept    []any                   // the Permits and bodies never finished, kept reachable
	calls   sync.WaitGroup
	sleeps  sync.WaitGroup
	peeks   sync.WaitGroup
	slots   bool // an in-flight window: look at its slots after a death
}

// harnessProc is one process: a Limiter with its own client and Throttle.
type harnessProc struct {
	pid    int
	client redis.UniversalClient
	lim    *Limiter
	th     *Throttle
	hc     *http.Client

	mu      sync.Mutex
	dead    bool
	cancels []context.CancelFunc
}

// harnessCall is a call in progress: the index of its record and the
// admission its goroutine's decisions reported.
type harnessCall struct {
	idx      int
	admitted *engine.Decision
	latency  time.Duration // of the call that admitted it
}

func (r *throttleRun) now() time.Duration { return time.Since(r.origin) }

func (r *throttleRun) at(t time.Time) time.Duration { return t.Sub(r.origin) }

func (r *throttleRun) fail(format string, args ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// goid returns the current goroutine's id: the hook runs on the goroutine
// of the Wait (or RoundTrip) that decides, which says which call it is.
func goid() uint64 {
	var buf [64]byte
	s := strings.TrimPrefix(string(buf[:runtime.Stack(buf[:], false)]), "goroutine ")
	n, _ := strconv.ParseUint(s[:strings.IndexByte(s, ' ')], 10, 64)
	return n
}

// hook records what a decision says: an admission (of the goroutine's
// call), or a backend error (a fault: the engine may have counted a call
// whose answer it lost).
func (r *throttleRun) hook(ev middleware.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Err != nil || (ev.Source != "redis" && ev.Source != "cache") {
		at := r.now()
		r.hist.Faults = append(r.hist.Faults, faults.Span{From: at, To: at, Why: fmt.Sprintf("decision by %s: %v", ev.Source, ev.Err)})
	}
	if c := r.byG[goid()]; c != nil && ev.Allowed {
		d := ev.Decision
		c.admitted, c.latency = &d, ev.Latency
	}
}

// slotLost notes a slot a renewal found gone: a loaded machine let its
// lease run out.
func (r *throttleRun) slotLost(engine.SlotLost) {
	at := r.now()
	r.mu.Lock()
	r.hist.SlotsLost = append(r.hist.SlotsLost, at)
	r.mu.Unlock()
}

func (r *throttleRun) startProc(i int) {
	r.mu.Lock()
	r.nextPID++
	pid := r.nextPID
	r.mu.Unlock()
	c := r.b.Client()
	lim, err := New(c, WithKeyPrefix(r.prefix), WithTimeout(r.b.Timeout), WithLogger(slog.New(slog.DiscardHandler)),
		WithHook(r.hook), WithMaxHold(harnessMaxHold), WithTransitBound(harnessTransit),
		WithEngineOptions(engine.WithLease(harnessLease), engine.WithSlotLost(r.slotLost)))
	if err != nil {
		c.Close()
		r.fail("New: %v", err)
		return
	}
	th, err := lim.Throttle("tf", r.p.Text())
	if err != nil {
		lim.Close()
		c.Close()
		r.fail("Throttle(%q): %v", r.p.Text(), err)
		return
	}
	pr := &harnessProc{pid: pid, client: c, lim: lim, th: th}
	pr.hc = &http.Client{Transport: th.Transport(harnessUpstream{r},
		WithCall(func(req *http.Request) (Call, error) {
			idx, _ := strconv.Atoi(req.Header.Get("X-Call"))
			return r.callOf(idx), nil
		}),
		WithActual(func(resp *http.Response) map[string]int64 {
			n, err := strconv.ParseInt(resp.Header.Get("X-Actual"), 10, 64)
			if err != nil || r.cost == "" {
				return nil
			}
			return map[string]int64{r.cost: n}
		}))}
	r.mu.Lock()
	r.procs[i] = pr
	r.all = append(r.all, pr)
	r.mu.Unlock()
}

// callOf returns the Call of record idx.
func (r *throttleRun) callOf(idx int) Call {
	r.mu.Lock()
	rec := r.hist.Calls[idx]
	r.mu.Unlock()
	c := Call{Class: rec.Class, Tenant: rec.Tenant}
	if r.keyed {
		c.Keys = map[string]string{"k": "k" + strconv.Itoa(rec.Key)}
	}
	if r.cost != "" {
		c.Costs = map[string]int64{r.cost: rec.Cost}
	}
	return c
}

// harnessUpstream is the fake upstream behind the Transport: it notes
// when it saw each call, and answers 429 with retry-after-ms when the
// scenario says so.
type harnessUpstream struct{ r *throttleRun }

func (u harnessUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	r := u.r
	idx, _ := strconv.Atoi(req.Header.Get("X-Call"))
	r.seen(idx)
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: req}
	if ra := req.Header.Get("X-Retry-After"); ra != "" {
		resp.StatusCode = http.StatusTooManyRequests
		resp.Header.Set("Retry-After-Ms", ra)
	}
	resp.Header.Set("X-Actual", req.Header.Get("X-Actual"))
	return resp, nil
}

// seen notes that the upstream saw call idx now, admitted by the
// decision its goroutine's hook reported.
func (r *throttleRun) seen(idx int) {
	at := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &r.hist.Calls[idx]
	c.Upstream = at
	if hc := r.byG[goid()]; hc != nil && hc.admitted != nil {
		c.Admitted, c.Decided, c.Spread = true, r.at(hc.admitted.Time), r.spread(hc)
	} else {
		r.errs = append(r.errs, fmt.Sprintf("call %d reached the upstream with no admission reported", idx))
	}
}

// call runs one call of the scenario on process pr.
func (r *throttleRun) call(step int, pr *harnessProc, c faults.ThrottleCall) {
	defer r.calls.Done()
	wait := harnessPatience
	if c.Cancel > 0 {
		wait = c.Cancel
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	pr.mu.Lock()
	if pr.dead {
		pr.mu.Unlock()
		return
	}
	pr.cancels = append(pr.cancels, cancel)
	pr.mu.Unlock()
	hc := &harnessCall{}
	g := goid()
	r.mu.Lock()
	hc.idx = len(r.hist.Calls)
	r.hist.Calls = append(r.hist.Calls, faults.CallRecord{Step: step, Proc: pr.pid, Key: c.Key, Cost: c.Cost, Actual: -1,
		Arrived: r.now(), Upstream: -1, Transit: time.Duration(r.rng.Int64N(int64(harnessTransit))), Class: c.Class, Tenant: c.Tenant})
	r.byG[g] = hc
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.byG, g)
		r.mu.Unlock()
	}()
	if c.Transport {
		r.viaTransport(pr, c, hc, ctx)
		return
	}
	p, err := pr.th.Wait(ctx, r.callOf(hc.idx))
	ended := r.now()
	r.mu.Lock()
	rec := &r.hist.Calls[hc.idx]
	rec.Ended = ended
	if err != nil {
		if hc.admitted != nil {
			rec.Admitted, rec.Phantom, rec.Decided = true, true, r.at(hc.admitted.Time)
		}
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			r.errs = append(r.errs, fmt.Sprintf("step %d: Wait: %v", step, err))
		}
		r.mu.Unlock()
		return
	}
	rec.Admitted, rec.Decided, rec.Spread = true, r.at(p.Decision().Time), r.spread(hc)
	rec.Charged = p.p.Charged()
	r.mu.Unlock()
	pr.mu.Lock()
	dead := pr.dead
	pr.mu.Unlock()
	if dead {
		return // a dead process calls nobody
	}
	r.seenDirect(hc.idx)
	time.Sleep(c.Hold)
	if c.Drop {
		r.mu.Lock()
		r.kept = append(r.kept, p)
		r.mu.Unlock()
		return
	}
	r.finish(pr, hc.idx, c, func() {
		var actual map[string]int64
		if c.Actual >= 0 && r.cost != "" {
			actual = map[string]int64{r.cost: c.Actual}
		}
		p.Finish(actual)
	})
}

// spread is the uncertainty of a decision time of hc (see
// faults.CallRecord.Spread).
func (r *throttleRun) spread(hc *harnessCall) time.Duration {
	if r.b.Caps.Nodes > 1 {
		return hc.latency
	}
	return 0
}

// seenDirect notes that the upstream saw a call made after Wait.
func (r *throttleRun) seenDirect(idx int) {
	at := r.now()
	r.mu.Lock()
	r.hist.Calls[idx].Upstream = at
	r.mu.Unlock()
}

// finish finishes call idx with fn, unless its process died: a dead
// process finishes nothing.
func (r *throttleRun) finish(pr *harnessProc, idx int, c faults.ThrottleCall, fn func()) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.dead {
		return
	}
	at := r.now()
	fn()
	r.mu.Lock()
	rec := &r.hist.Calls[idx]
	rec.Finished = at
	if c.Actual >= 0 && r.cost != "" {
		rec.Actual = c.Actual
	}
	r.mu.Unlock()
}

func (r *throttleRun) viaTransport(pr *harnessProc, c faults.ThrottleCall, hc *harnessCall, ctx context.Context) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://upstream.test/", nil)
	req.Header.Set("X-Call", strconv.Itoa(hc.idx))
	if c.Actual >= 0 {
		req.Header.Set("X-Actual", strconv.FormatInt(c.Actual, 10))
	}
	if c.RetryAfter > 0 {
		req.Header.Set("X-Retry-After", strconv.FormatInt(c.RetryAfter.Milliseconds(), 10))
	}
	resp, err := pr.hc.Do(req)
	ended := r.now()
	r.mu.Lock()
	rec := &r.hist.Calls[hc.idx]
	rec.Ended = ended
	if err != nil {
		if hc.admitted != nil && rec.Upstream < 0 {
			rec.Admitted, rec.Phantom, rec.Decided = true, true, r.at(hc.admitted.Time)
		}
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			r.errs = append(r.errs, fmt.Sprintf("step %d: RoundTrip: %v", rec.Step, err))
		}
		r.mu.Unlock()
		return
	}
	if c.RetryAfter > 0 {
		// The Transport blocked the lane before it returned: until now
		// plus the upstream's wait at the latest.
		r.hist.Blocks = append(r.hist.Blocks, faults.Block{Key: c.Key, From: rec.Upstream, To: ended + c.RetryAfter})
	}
	r.mu.Unlock()
	io.Copy(io.Discard, resp.Body)
	time.Sleep(c.Hold)
	if c.Drop {
		r.mu.Lock()
		r.kept = append(r.kept, resp.Body)
		r.mu.Unlock()
		return
	}
	r.finish(pr, hc.idx, c, func() { resp.Body.Close() })
}

// die kills process i: its callers are gone (their contexts end), its
// Limiter closes with nothing finished, and a new process takes its
// place.
func (r *throttleRun) die(i int) {
	pr := r.procs[i]
	if pr == nil {
		return
	}
	pr.mu.Lock()
	pr.dead = true
	at := r.now()
	for _, c := range pr.cancels {
		c()
	}
	pr.mu.Unlock()
	r.mu.Lock()
	r.hist.Deaths = append(r.hist.Deaths, faults.Death{Proc: pr.pid, At: at})
	r.hist.Faults = append(r.hist.Faults, faults.Span{From: at, To: at, Why: fmt.Sprintf("process %d died", pr.pid)})
	r.mu.Unlock()
	pr.lim.Close()
	pr.client.Close()
	r.startProc(i)
	if r.slots {
		r.peeks.Add(1)
		go r.peekSlots(at + harnessLease + 250*time.Millisecond)
	}
}

// peekSlots looks, at at, at the in-flight windows' slots of every
// subject in Redis, through a live process.
func (r *throttleRun) peekSlots(at time.Duration) {
	defer r.peeks.Done()
	time.Sleep(at - r.now())
	for k := range max(r.p.Keys, 1) {
		r.mu.Lock()
		var pr *harnessProc
		procs := slices.Clone(r.procs)
		r.mu.Unlock()
		for _, x := range procs {
			if x == nil {
				continue
			}
			x.mu.Lock()
			dead := x.dead
			x.mu.Unlock()
			if !dead {
				pr = x
				break
			}
		}
		if pr == nil {
			return
		}
		c := Call{}
		if r.keyed {
			c.Keys = map[string]string{"k": "k" + strconv.Itoa(k)}
		}
		if r.cost != "" {
			c.Costs = map[string]int64{r.cost: 1}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, err := pr.th.t.Request(ctx, throttle.Call(c))
		var d engine.Decision
		if err == nil {
			d, err = pr.lim.engine.Peek(ctx, req)
		}
		cancel()
		if err != nil || d.Source != "redis" {
			continue // Redis is down, or the process died meanwhile
		}
		for _, ws := range d.Windows {
			if !ws.Window.Concurrent {
				continue
			}
			subject := -1
			if r.p.Rules[ws.Check].Key {
				subject = k
			}
			r.mu.Lock()
			r.hist.Peeks = append(r.hist.Peeks, faults.SlotPeek{At: r.at(d.Time), Rule: ws.Check, Subject: subject, Used: ws.Used})
			r.mu.Unlock()
		}
	}
}

// step runs step i of the scenario.
func (r *throttleRun) step(i int, s faults.ThrottleStep) {
	switch s.Kind {
	case faults.TCalls:
		for _, c := range s.Calls {
			pr := r.procs[c.Proc%len(r.procs)]
			if pr == nil {
				continue
			}
			r.calls.Add(1)
			go r.call(i, pr, c)
		}
	case faults.TPause:
		time.Sleep(s.D)
	case faults.TDie:
		r.die(s.Proc % len(r.procs))
	case faults.TOutage:
		node := s.Node % max(r.b.Caps.Nodes, 1)
		from := r.now()
		r.b.Kill(node)
		time.Sleep(s.D)
		empty := s.Empty || !r.b.Caps.Persist
		r.b.Restart(node, empty)
		if r.b.Healthy != nil {
			if err := r.b.Healthy(); err != nil {
				r.fail("step %d: restart: %v", i, err)
			}
		}
		to := r.now()
		r.mu.Lock()
		if empty {
			r.hist.Losses = append(r.hist.Losses, to)
		}
		r.hist.Faults = append(r.hist.Faults, faults.Span{From: from, To: to, Why: s.String()})
		r.mu.Unlock()
	case faults.TSleep:
		if r.b.Sleep == nil {
			return
		}
		from := r.now()
		wait := r.b.Sleep(s.D)
		r.sleeps.Add(1)
		go func() {
			defer r.sleeps.Done()
			wait()
			to := r.now()
			r.mu.Lock()
			r.hist.Faults = append(r.hist.Faults, faults.Span{From: from, To: to, Why: s.String()})
			r.mu.Unlock()
		}()
	}
}

// runThrottleScenario runs p on b and returns its history, what the model
// found, and what went wrong outside the model.
func runThrottleScenario(t *testing.T, b *faults.Backend, p faults.ThrottleScenario, bound time.Duration) (faults.ThrottleHistory, faults.ThrottleReport, []string) {
	r := &throttleRun{b: b, p: p, prefix: harnessPrefix(), keyed: p.HasKey(), cost: p.CostName(),
		procs: make([]*harnessProc, p.Procs), byG: map[uint64]*harnessCall{}, rng: rand.New(rand.NewPCG(p.Seed, 0x7a))}
	r.hist = faults.ThrottleHistory{Rules: p.Rules, Keys: p.Keys, Lease: harnessLease, SlotRetry: harnessSlotRetry,
		MaxHold: harnessMaxHold, Bound: bound, Skew: harnessSkew, Settle: throttle.FleetLease + throttle.FleetLease/2,
		Transit: harnessTransit, Shares: p.Shares, Fair: p.Fair()}
	for _, l := range p.Rules {
		r.slots = r.slots || slices.ContainsFunc(l.Windows, func(w faults.Window) bool { return w.Concurrent })
	}
	r.origin = time.Now()
	for i := range p.Procs {
		r.startProc(i)
	}
	defer func() {
		for _, pr := range r.all {
			if !pr.dead {
				pr.lim.Close()
				pr.client.Close()
			}
		}
	}()
	if len(r.errs) > 0 {
		return r.hist, faults.ThrottleReport{}, r.errs
	}
	for i, s := range p.Steps {
		r.step(i, s)
	}
	r.calls.Wait()
	r.sleeps.Wait()
	r.peeks.Wait()
	r.hist.End = r.now()
	// Memory: once every call has returned, no throttle holds a waiter,
	// here or in the fleet's queue in Redis, and a throttle holds a lane
	// only for the keys its calls used.
	time.Sleep(100 * time.Millisecond) // a turn script call may be on its way
	for _, pr := range r.procs {
		if pr == nil {
			continue
		}
		r.errs = append(r.errs, r.fleetLeft(pr)...)
		if n := pr.th.Stats().Waiting; n != 0 {
			r.errs = append(r.errs, fmt.Sprintf("process %d: %d callers still counted waiting after every call returned", pr.pid, n))
		}
		states := pr.th.t.Lanes()
		lanes := len(states)
		for _, ln := range states {
			if ln.Waiters > 0 {
				r.errs = append(r.errs, fmt.Sprintf("process %d: lane %s holds %d waiters after every call returned", pr.pid, ln.ID, ln.Waiters))
			}
		}
		if lanes > p.Keys {
			r.errs = append(r.errs, fmt.Sprintf("process %d: %d lanes for %d keys", pr.pid, lanes, p.Keys))
		}
	}
	return r.hist, faults.CheckThrottle(r.hist), r.errs
}

// fleetLeft reports the lanes whose fleet queue in Redis still holds pr's
// entry, or which pr still takes itself to be in, after every call
// returned: a waiter gone is one nobody waits behind.
func (r *throttleRun) fleetLeft(pr *harnessProc) []string {
	var out []string
	for _, ln := range pr.th.t.Lanes() {
		if ln.Joined {
			out = append(out, fmt.Sprintf("process %d: lane %s still joined to the fleet's queue after every call returned", pr.pid, ln.ID))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := pr.client.ZScore(ctx, ln.Queue, pr.th.t.Member()).Err()
		cancel()
		switch {
		case err == nil:
			out = append(out, fmt.Sprintf("process %d: the fleet's queue of lane %s still holds its entry after every call returned", pr.pid, ln.ID))
		case !errors.Is(err, redis.Nil):
			out = append(out, fmt.Sprintf("process %d: reading the fleet's queue of lane %s: %v", pr.pid, ln.ID, err))
		}
	}
	return out
}
