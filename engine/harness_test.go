package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/slidelimit/slidelimit/internal/faults"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// The fault harness (TestFaults): seeded histories of requests from
// several engines, clock steps, give-backs and faults, run against each
// backend and checked against the model of internal/faults.
var (
	faultsDuration = flag.Duration("faults.duration", 0, "run TestFaults's generated histories for this long per backend instead of its CI budget")
	faultsSkip     = flag.String("faults.skip", "", "skip TestFaults's scenarios whose \"mode/fail\" (such as \"distinct/local\") matches this regexp, to set a known hole aside while looking for others")
	faultsSeed     = flag.Uint64("faults.seed", 0, "run TestFaults on this one seed (with its regression seeds skipped)")
)

// faultsBudget is the number of seeded histories each backend runs in CI.
var faultsBudget = map[string]int{"miniredis": 40, "redis": 12, "cluster": 5}

// faultsRegressions is where every scenario that ever failed stays, as
// <backend>-<seed>.json, run every time before the budget's seeds: the
// failure message prints the scenario to save there. A scenario is kept whole
// rather than as a seed, since a seed's scenario changes with the generator.
const faultsRegressions = "testdata/faults"

// faultsOpen are the budget's seeds that find a hole not fixed yet: CI
// skips them, and their scenarios stay in faultsOpenDir (outside the
// regressions) with what they find, until the hole is closed and they
// move to faultsRegressions. -faults.seed still runs them.
var faultsOpen = map[string][]uint64{}

const faultsOpenDir = "testdata/faults-open"

// faultBackend is a store the harness can hurt.
type faultBackend struct {
	name    string
	caps    faults.Caps
	timeout time.Duration
	client  func() Client // a new client, as a new process has
	kill    func(node int)
	restart func(node int, empty bool)
	alive   func(node int) bool
	sleep   func(d time.Duration) (wait func())
	evict   func() error
	healthy func() error // waits until a healed backend serves every key; nil: at once
	// serves reports whether node n serves key (a cluster's master);
	// nil: every node serves every key.
	serves func(n int, key string) bool
	// failover says a killed master's replica takes over: the writes it
	// had not replicated may be lost at the kill, and a restart loses
	// nothing more (the node rejoins as a replica).
	failover bool
}

// faultRun is one history being run.
type faultRun struct {
	t       *testing.T
	b       *faultBackend
	p       faults.Scenario
	clk     *redistest.Clock
	prefix  string
	ws      []rules.Window
	zone    *time.Location // the calendar windows' (Scenario.Zone)
	fail    rules.FailMode
	engines []*Engine
	procs   []int
	clients []Client
	nextPID int
	hist    faults.History
	owners  map[string]int  // the node serving each subject's keys (see faultBackend.serves)
	limits  []int64         // the group's limits in force, by window (Override steps change them)
	live    []liveAdmission // admissions that can be given back
	asleep  func()          // waits for a DEBUG SLEEP in progress
	errs    []string        // what went wrong outside the model (a bug of the run or the engine)
}

type liveAdmission struct {
	e   *Engine
	d   Decision
	idx int // in hist.Decisions
}

var discardLog = slog.New(slog.DiscardHandler)

func (r *faultRun) startEngine(i int) {
	r.nextPID++
	c := r.b.client()
	e, err := New(c, WithKeyPrefix(r.prefix), WithNode(int64(r.nextPID)), WithClock(r.clk.Now),
		WithFailMode(r.fail), WithTimeout(r.b.timeout), WithLogger(discardLog),
		// Slots outlive every history: the clock is the test's, and a
		// dead holder's slots must stay held (the model counts them).
		WithLease(time.Hour))
	if err != nil {
		r.errs = append(r.errs, fmt.Sprintf("New: %v", err))
		return
	}
	r.engines[i], r.procs[i] = e, r.nextPID
	r.clients = append(r.clients, c)
}

// requestOf returns the engine's request for q in the scenario's group (see
// checkOf), or false when q reaches no engine.
func (r *faultRun) requestOf(q faults.Req) (Request, bool) {
	c, _, _, ok := r.checkOf(q)
	return Request{Scope: "f", Checks: []Check{c}, Zone: r.zone}, ok
}

// resetsOf returns the Reset of each window of a Redis decision's one
// check (the history's windows, in order), nil for another decision.
func resetsOf(d Decision) []time.Duration {
	if d.Source != fromRedis.String() {
		return nil
	}
	out := make([]time.Duration, len(d.Windows))
	for i, w := range d.Windows {
		out[i] = w.Reset
	}
	return out
}

func sourceOf(name string) faults.Source {
	switch sourceNamed(name) {
	case fromCache:
		return faults.Cache
	case fromLocal:
		return faults.Local
	case fromFailOpen:
		return faults.FailOpen
	case fromFailClosed:
		return faults.FailClosed
	}
	return faults.Redis
}

func (r *faultRun) at() time.Duration { return r.clk.Now().Sub(redistest.Epoch) }

// step runs step i of the scenario.
func (r *faultRun) step(i int, s faults.Step) {
	ctx := context.Background()
	switch s.Kind {
	case faults.Requests:
		ds := make([]Decision, len(s.Reqs))
		errs := make([]error, len(s.Reqs))
		var wg sync.WaitGroup
		for j, q := range s.Reqs {
			if req, ok := r.requestOf(q); ok {
				wg.Go(func() { ds[j], errs[j] = r.engines[q.Engine%len(r.engines)].Allow(ctx, req) })
			}
		}
		wg.Wait()
		for j, q := range s.Reqs {
			_, subject, limits, ok := r.checkOf(q)
			if !ok {
				continue // exempt, or refused before the engine
			}
			e := r.engines[q.Engine%len(r.engines)]
			var re *requestError
			if errors.As(errs[j], &re) || errors.Is(errs[j], ErrClosed) {
				r.errs = append(r.errs, fmt.Sprintf("step %d: Allow: %v", i, errs[j]))
			}
			d := ds[j]
			r.hist.Decisions = append(r.hist.Decisions, faults.Decision{
				Step: i, At: r.at(), Proc: r.procs[q.Engine%len(r.engines)], Subject: subject,
				Allowed: d.Allowed, Source: sourceOf(d.Source), Cost: q.Cost, Limits: limits,
				Resets: resetsOf(d),
			})
			if r.p.Mode == "distinct" {
				r.hist.Decisions[len(r.hist.Decisions)-1].Value = "v" + strconv.Itoa(q.Value)
			}
			if d.Allowed && (d.Source == "redis" || d.Source == "local") {
				r.live = append(r.live, liveAdmission{e, d, len(r.hist.Decisions) - 1})
			}
		}
	case faults.Advance:
		r.clk.Add(s.D)
	case faults.GiveBack:
		if len(r.live) == 0 {
			return
		}
		k := s.Pick % len(r.live)
		a := r.live[k]
		r.live = append(r.live[:k], r.live[k+1:]...)
		switch err := a.e.Finish(ctx, a.d, Outcome{GiveBack: true}); {
		case err == nil && r.hist.Decisions[a.idx].Settled && !r.hist.Decisions[a.idx].Unsure:
			// A settled request is not given back (engine.Finish): it
			// stays counted at its settled cost (found by redis seed
			// 329492839123666684).
			r.hist.Decisions[a.idx].Released = cmp.Or(r.hist.Decisions[a.idx].Released, i)
		case err == nil:
			r.hist.Decisions[a.idx].GivenBack = true
			r.hist.Decisions[a.idx].Released = cmp.Or(r.hist.Decisions[a.idx].Released, i)
			r.hist.Decisions[a.idx].Back = cmp.Or(r.hist.Decisions[a.idx].Back, i)
		case errors.Is(err, ErrBackend):
			// Queued: it may be applied later, or never.
			r.hist.Decisions[a.idx].GivenBack = true
			r.hist.Decisions[a.idx].Unsure = true
			r.hist.Decisions[a.idx].Released = cmp.Or(r.hist.Decisions[a.idx].Released, i)
			r.hist.Decisions[a.idx].Back = cmp.Or(r.hist.Decisions[a.idx].Back, i)
		case errors.Is(err, ErrClosed):
			// Its process is gone: the entry stays.
		default:
			r.errs = append(r.errs, fmt.Sprintf("step %d: Finish: %v", i, err))
		}
	case faults.Settle:
		if len(r.live) == 0 {
			return
		}
		a := r.live[s.Pick%len(r.live)]
		d := &r.hist.Decisions[a.idx]
		if d.Settled {
			return // settled once: Finish does it at most once
		}
		switch err := a.e.Finish(ctx, a.d, Outcome{Actual: []int64{s.Actual}}); {
		case err == nil:
			d.Settled, d.Actual, d.Back = true, s.Actual, cmp.Or(d.Back, i)
		case errors.Is(err, ErrBackend):
			d.Settled, d.Actual, d.Unsure, d.Back = true, s.Actual, true, cmp.Or(d.Back, i)
		case errors.Is(err, ErrClosed):
		default:
			r.errs = append(r.errs, fmt.Sprintf("step %d: Finish: %v", i, err))
		}
	case faults.Release:
		if len(r.live) == 0 {
			return
		}
		a := r.live[s.Pick%len(r.live)]
		d := &r.hist.Decisions[a.idx]
		switch err := a.e.Finish(ctx, a.d, Outcome{}); {
		case err == nil || errors.Is(err, ErrBackend):
			// A failed release may leave the slot held: released counts
			// it free, which only loosens the bound.
			if d.Released == 0 {
				d.Released = i
			}
		case errors.Is(err, ErrClosed):
		default:
			r.errs = append(r.errs, fmt.Sprintf("step %d: Finish: %v", i, err))
		}
	case faults.Kill:
		r.settle()
		if r.b.alive(s.Node) {
			r.b.kill(s.Node)
			if r.b.failover {
				r.hist.Losses = append(r.hist.Losses, faults.Loss{Step: i, At: r.at(), Why: "failover", Subjects: r.servedBy(s.Node), Maybe: true})
			}
		}
	case faults.Restart, faults.RestartEmpty:
		r.settle()
		if !r.b.alive(s.Node) {
			empty := (s.Kind == faults.RestartEmpty || !r.b.caps.Persist) && !r.b.failover
			r.b.restart(s.Node, empty)
			r.recovered()
			if empty {
				r.hist.Losses = append(r.hist.Losses, faults.Loss{Step: i, At: r.at(), Why: "restart empty", Subjects: r.servedBy(s.Node)})
			}
		}
	case faults.Sleep:
		r.settle()
		if r.b.sleep != nil && r.b.alive(0) {
			r.asleep = r.b.sleep(s.D)
		}
	case faults.Evict:
		r.settle()
		if r.b.evict != nil && r.b.alive(0) {
			if err := r.b.evict(); err != nil {
				r.errs = append(r.errs, fmt.Sprintf("step %d: evict: %v", i, err))
			}
			r.hist.Losses = append(r.hist.Losses, faults.Loss{Step: i, At: r.at(), Why: "eviction", Maybe: true})
		}
	case faults.RestartEngine:
		j := s.Engine % len(r.engines)
		r.engines[j].Close()
		r.startEngine(j)
	case faults.Override:
		r.override(s)
	}
}

// servedBy returns the subjects whose keys node n serves, or nil for all.
func (r *faultRun) servedBy(n int) []string {
	if r.b.serves == nil {
		return nil
	}
	out := []string{}
	for s, owner := range r.owners {
		if owner == n {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// recovered waits (up to 10 s), when every server runs, until no engine
// holds one for down,
// so that the steps after a restart meet Redis rather than the fail mode
// for however long the probes take: a history then replays the same way.
func (r *faultRun) recovered() {
	for n := range max(r.b.caps.Nodes, 1) {
		if !r.b.alive(n) {
			return // some keys stay in the fail mode anyway
		}
	}
	if r.b.healthy != nil {
		if err := r.b.healthy(); err != nil {
			r.errs = append(r.errs, fmt.Sprintf("restart: %v", err))
			return
		}
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		down := false
		for _, e := range r.engines {
			down = down || e.doms.AnyDown()
		}
		if !down {
			return
		}
	}
}

// settle waits for a DEBUG SLEEP in progress to end.
func (r *faultRun) settle() {
	if r.asleep != nil {
		r.asleep()
		r.asleep = nil
		r.recovered()
	}
}

// runFaultScenario runs p on b and returns the history and its violations, model's
// and the final audit's (what Redis holds against what was admitted).
func runFaultScenario(t *testing.T, b *faultBackend, p faults.Scenario) (faults.History, []string) {
	r := &faultRun{t: t, b: b, p: p, clk: redistest.NewClock(), prefix: redistest.Prefix(t),
		engines: make([]*Engine, p.Engines), procs: make([]int, p.Engines)}
	for _, w := range p.Windows {
		r.ws = append(r.ws, rules.Window{Limit: w.Limit, Period: w.Period, Concurrent: w.Concurrent, Calendar: string(w.Calendar)})
		r.hist.Windows = append(r.hist.Windows, w)
		r.limits = append(r.limits, w.Limit)
	}
	r.clk.Set(p.Start)
	r.hist.Origin = redistest.Epoch
	if p.Zone != "" {
		zone, err := ruletime.LoadZone(p.Zone)
		if err != nil {
			return r.hist, []string{fmt.Sprintf("zone: %v", err)}
		}
		r.zone, r.hist.Zone = zone, zone
	}
	r.fail = rules.FailMode(p.Fail)
	r.hist.Fail = p.Fail
	r.hist.Distinct = p.Mode == "distinct"
	r.hist.Block = p.Block
	for i := range r.engines {
		r.startEngine(i)
	}
	if b.serves != nil && r.engines[0] != nil {
		// Masters without replicas keep their slots: who serves a
		// subject is known before any fault.
		r.owners = map[string]int{}
		names, reqs := r.subjectReqs()
		for k, q := range reqs {
			c, _, _, _ := r.checkOf(q)
			key := r.engines[0].keyOf("f", c)
			r.owners[names[k]] = -1
			for n := range b.caps.Nodes {
				if b.serves(n, key) {
					r.owners[names[k]] = n
				}
			}
		}
	}
	defer func() {
		for _, e := range r.engines {
			if e != nil {
				e.Close()
			}
		}
		for _, c := range r.clients {
			if cl, ok := c.(interface{ Close() error }); ok {
				cl.Close()
			}
		}
	}()
	if len(r.errs) > 0 {
		return r.hist, r.errs
	}
	for i, s := range p.Steps {
		r.step(i, s)
		if len(r.errs) > 0 {
			return r.hist, r.errs
		}
	}
	// Heal: whatever is down restarts, keeping its data.
	r.settle()
	for n := range max(b.caps.Nodes, 1) {
		if !b.alive(n) {
			b.restart(n, !b.caps.Persist)
			if !b.caps.Persist && !b.failover {
				r.hist.Losses = append(r.hist.Losses, faults.Loss{Step: len(p.Steps), At: r.at(), Why: "restart empty (heal)", Subjects: r.servedBy(n)})
			}
		}
	}
	if b.healthy != nil {
		if err := b.healthy(); err != nil {
			r.errs = append(r.errs, fmt.Sprintf("heal: %v", err))
		}
	}
	out := r.errs
	for _, v := range faults.Check(r.hist) {
		out = append(out, v.String())
	}
	out = append(out, r.audit()...)
	return r.hist, out
}

// audit compares what Redis holds for every subject and window with what
// the history admitted: an entry no admission accounts for is a denied
// request's (or a given-back one's) that should not be there.
func (r *faultRun) audit() []string {
	c := r.b.client()
	defer func() {
		if cl, ok := c.(interface{ Close() error }); ok {
			cl.Close()
		}
	}()
	e, err := New(c, WithKeyPrefix(r.prefix), WithClock(r.clk.Now), WithFailMode(rules.FailClosed),
		WithTimeout(2*time.Second), WithLogger(discardLog))
	if err != nil {
		return []string{fmt.Sprintf("audit: New: %v", err)}
	}
	defer e.Close()
	var out []string
	names, reqs := r.subjectReqs()
	for k, q := range reqs {
		subject := names[k]
		req, _ := r.requestOf(q)
		var d Decision
		for try := 0; ; try++ {
			d, err = e.peek(context.Background(), req)
			if err == nil && d.Source == "redis" {
				break
			}
			if try == 50 {
				return append(out, fmt.Sprintf("audit: Peek %s: %v (source %v)", subject, err, d.Source))
			}
			time.Sleep(100 * time.Millisecond)
		}
		for _, ws := range d.Windows {
			if ws.Window.Concurrent {
				continue // slots are checked by the model alone
			}
			w := faults.Window{Limit: ws.Window.Limit, Period: ws.Window.Period, Calendar: string(ws.Window.Calendar)}
			if held := faults.Held(r.hist, subject, w, r.at()); ws.Used > held {
				out = append(out, fmt.Sprintf("subject %s, window %v: Redis holds %d entries at %v, admissions account for at most %d",
					subject, w, ws.Used, r.at(), held))
			}
		}
	}
	return out
}

// faultsScenarios returns the scenarios a backend runs first: its regression
// scenarios (none when -faults.seed is set), then its budget's seeds, or the
// one seed of -faults.seed; endless says to go on with random seeds.
func faultsScenarios(t *testing.T, b *faultBackend) (scenarios []faults.Scenario, endless bool) {
	if *faultsSeed != 0 {
		return []faults.Scenario{faults.Generate(*faultsSeed, b.caps)}, false
	}
	files, err := filepath.Glob(filepath.Join(faultsRegressions, b.name+"-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var p faults.Scenario
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		scenarios = append(scenarios, p)
	}
	for i := range faultsBudget[b.name] {
		if seed := uint64(i + 1); slices.Contains(faultsOpen[b.name], seed) {
			t.Logf("%s: seed %d set aside (engine/%s)", b.name, seed, faultsOpenDir)
		} else {
			scenarios = append(scenarios, faults.Generate(seed, b.caps))
		}
	}
	return scenarios, *faultsDuration > 0
}

// runFaults runs a backend's seeds, and on the first failure shrinks it and
// reports the seed, the shrunk scenario and its violations.
func runFaults(t *testing.T, b *faultBackend) {
	scenarios, endless := faultsScenarios(t, b)
	began := time.Now()
	var histories, steps, decisions, failed int
	next := uint64(time.Now().UnixNano())
	for i := 0; ; i++ {
		var p faults.Scenario
		switch {
		case i < len(scenarios):
			p = scenarios[i]
		case endless && time.Since(began) < *faultsDuration:
			next = next*6364136223846793005 + 1442695040888963407
			p = faults.Generate(next>>1, b.caps)
		default:
			t.Logf("%s: %d histories, %d steps, %d decisions in %v", b.name, histories, steps, decisions, time.Since(began).Round(time.Millisecond))
			return
		}
		seed := p.Seed
		if *faultsSkip != "" && regexp.MustCompile(*faultsSkip).MatchString(p.Mode+"/"+p.Fail) {
			continue
		}
		h, vs := runFaultScenario(t, b, p)
		histories++
		steps += len(p.Steps)
		decisions += len(h.Decisions)
		if len(vs) == 0 {
			continue
		}
		if failed++; failed > 1 {
			// Only the first failure is shrunk: each try runs a history.
			t.Errorf("%s: seed %d failed too (-faults.seed=%d):\n  %s", b.name, seed, seed, strings.Join(vs, "\n  "))
			continue
		}
		// Shrinking runs the scenario again and again: at most 40 times, for
		// at most 30 s (a cluster's history takes seconds).
		deadline := time.Now().Add(30 * time.Second)
		shrunk := faults.Shrink(p, 40, func(q faults.Scenario) bool {
			if time.Now().After(deadline) {
				return false
			}
			_, vs := runFaultScenario(t, b, q)
			return len(vs) > 0
		})
		sh, svs := runFaultScenario(t, b, shrunk)
		keep := shrunk
		if len(svs) == 0 {
			keep = p // the shrunk scenario passed this time: keep the whole one
		}
		js, _ := json.MarshalIndent(keep, "", "\t")
		t.Errorf("%s: seed %d failed (replay: go test -run 'TestFaults/%s' ./engine -faults.seed=%d):\n  %s\nplan:\n%vhistory:\n%s\nshrunk scenario:\n%vits violations:\n  %s\nits history:\n%s\nkeep it as engine/%s/%s-%d.json:\n%s",
			b.name, seed, b.name, seed, strings.Join(vs, "\n  "), p, h, shrunk, strings.Join(svs, "\n  "), sh,
			faultsRegressions, b.name, seed, js)
	}
}

// TestFaults runs the fault harness on every backend: a fixed budget of
// seeded histories each (see faultsBudget), or -faults.duration of random
// ones, or the one seed of -faults.seed. See docs/operations.md, "What the
// fault harness checks".
func TestFaults(t *testing.T) {
	// go-redis logs every refused dial of a killed server.
	logging.Disable()
	// miniredis first, alone: its histories take the process's CPU (the
	// store runs in it). Then the servers' backends side by side: they
	// share nothing (each its own store, prefixes and clock) and mostly
	// wait on the servers.
	t.Run("miniredis", func(t *testing.T) { runFaults(t, miniredisBackend(t)) })
	t.Run("redis", func(t *testing.T) { t.Parallel(); runFaults(t, redisBackend(t)) })
	t.Run("cluster", func(t *testing.T) { t.Parallel(); runFaults(t, clusterBackend(t, false)) })
	if *faultsDuration > 0 || *faultsSeed != 0 {
		// A failover takes about 2 s and a history holds several: too
		// slow for CI's budget, run with -faults.duration or -faults.seed.
		t.Run("failover", func(t *testing.T) { t.Parallel(); runFaults(t, clusterBackend(t, true)) })
	}
}

// redisClient returns a client configured as docs/engine.md asks.
func redisClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
}
