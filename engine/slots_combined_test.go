package engine

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// Tests of features combined: in-flight windows beside blocks, settlement,
// cached denials, the fail modes and Peek.

// slotState returns the in-flight window's state in d.
func slotState(t *testing.T, d Decision) WindowState {
	t.Helper()
	for _, ws := range d.Windows {
		if ws.Window.Concurrent {
			return ws
		}
	}
	t.Fatalf("no in-flight window in %+v", d)
	return WindowState{}
}

// localOK accepts nil, and a backend error from an engine whose fail mode
// is local (its Redis is refused).
func localOK(t *testing.T, e *Engine, err error) {
	t.Helper()
	var be *backendError
	if err != nil && !(errors.As(err, &be) && e.fail == rules.FailLocal) {
		t.Fatal(err)
	}
}

// comboBlockSlots runs user:2/min,1 concurrent; block:1h: an in-flight
// denial starts no block, a rate denial does and then denies whatever the
// slots say, Peek reports the block and the slots without writing, a
// Release during the block frees the slot, and Reset lifts the block and
// frees the slots.
func comboBlockSlots(t *testing.T, e *Engine, clk *redistest.Clock, rate rules.Window) {
	t.Helper()
	ctx := context.Background()
	c := blocked(user("u", rate, conc(1)), time.Hour)
	r := req(c)
	allow := func(at time.Duration) Decision {
		t.Helper()
		clk.Set(at)
		d, err := e.Allow(ctx, r)
		localOK(t, e, err)
		return d
	}
	peek := func(at time.Duration) Decision {
		t.Helper()
		clk.Set(at)
		d, err := e.peek(ctx, r)
		localOK(t, e, err)
		return d
	}

	a := allow(0)
	if !a.Allowed || slotState(t, a).Used != 1 {
		t.Fatalf("first: %+v", a)
	}
	b := allow(time.Second) // the slot is held: denied by it, no block
	if b.Allowed || b.Blocked || !b.Denied.Window.Concurrent || b.RetryAfter != time.Second {
		t.Fatalf("second while the first runs: %+v; want an in-flight denial without a block", b)
	}
	localOK(t, e, e.release(ctx, r, a))
	c2 := allow(2 * time.Second) // rate 2/2, holds the slot
	if !c2.Allowed {
		t.Fatalf("third after the release: %+v; the slot denial must not have blocked", c2)
	}
	localOK(t, e, e.release(ctx, r, c2))
	d := allow(3 * time.Second) // the rate window is full: the block starts
	if d.Allowed || !d.Blocked || d.Denied.Window.Concurrent || d.RetryAfter < time.Hour-time.Second {
		t.Fatalf("after the rate: %+v; want a rate denial that blocks for 1h", d)
	}
	if ws := slotState(t, d); ws.Used != 0 {
		t.Fatalf("rate denial: slot window %+v, want none used", ws)
	}
	for _, at := range []time.Duration{2 * time.Minute, 30 * time.Minute} { // the rate has room again
		if d := allow(at); d.Allowed || !d.Blocked || d.RetryAfter != time.Hour+3*time.Second-at {
			t.Fatalf("at %v during the block: %+v; want blocked until 1h3s", at, d)
		}
	}
	p := peek(31 * time.Minute)
	if p.Allowed || !p.Blocked || slotState(t, p).Used != 0 {
		t.Fatalf("peek during the block: %+v", p)
	}
	if err := e.resetSubject(ctx, "s", c.Rule, "u"); err != nil && e.fail != rules.FailLocal {
		t.Fatal(err)
	}
	x := allow(32 * time.Minute)
	if !x.Allowed || x.Blocked || slotState(t, x).Used != 1 {
		t.Fatalf("after Reset: %+v; want admitted, unblocked, one slot", x)
	}
	if p := peek(32 * time.Minute); p.Allowed || slotState(t, p).Used != 1 {
		t.Fatalf("peek with the slot held: %+v", p)
	}
	// A Reset while x runs frees its slot (x then holds none).
	if err := e.resetSubject(ctx, "s", c.Rule, "u"); err != nil && e.fail != rules.FailLocal {
		t.Fatal(err)
	}
	y := allow(33 * time.Minute)
	if !y.Allowed {
		t.Fatalf("after a Reset while a request runs: %+v; want admitted", y)
	}
	localOK(t, e, e.release(ctx, r, x)) // x's slot is gone: frees nothing
	if z := allow(33*time.Minute + time.Second); z.Allowed || z.Blocked || !z.Denied.Window.Concurrent {
		t.Fatalf("a Release of a reset slot freed y's: %+v", z)
	}
	localOK(t, e, e.release(ctx, r, y))
	// The second Reset forgot x in the rate window too: y and one more fit.
	w := allow(33*time.Minute + 2*time.Second)
	if !w.Allowed || w.Windows[0].Used != 2 {
		t.Fatalf("second in a minute after Reset: %+v; want admitted", w)
	}
	localOK(t, e, e.release(ctx, r, w))
	if d := allow(33*time.Minute + 3*time.Second); d.Allowed || !d.Blocked {
		t.Fatalf("third in a minute after Reset: %+v; want blocked", d)
	}
}

// TestComboBlockSlots runs comboBlockSlots on real Redis, miniredis, the
// 3-master cluster, a Ring and the fallback limiter, with and without
// cached denials, with an exact and a grained rate window.
func TestComboBlockSlots(t *testing.T) {
	t.Parallel()
	for _, b := range testBackends(t) {
		for _, cached := range []bool{false, true} {
			for _, grain := range []time.Duration{0, time.Second} {
				name := b.name + cacheName(cached)
				if grain > 0 {
					name += " grained" // the rate key's hash tag is not the slot key's
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					prefix := redistest.Prefix(t)
					if b.ttl != nil {
						b.ttl(t, prefix)
					}
					clk := redistest.NewClock()
					opts := append([]Option{WithKeyPrefix(prefix), WithClock(clk.Now), WithCachedDenials(cached)}, b.opts...)
					rate := win(2, time.Minute)
					rate.Grain = grain
					comboBlockSlots(t, newEngine(t, b.c, opts...), clk, rate)
				})
			}
		}
	}
}

// comboSettleSlots settles requests that also hold a slot (bytes:1000/min
// beside user:1 concurrent) in every order with Release and GiveBack: each
// frees the slot once and changes the cost once.
func comboSettleSlots(t *testing.T, e *Engine, clk *redistest.Clock) {
	t.Helper()
	ctx := context.Background()
	steps := []struct {
		name  string
		ops   []string // "settle" (to 10), "release", "giveback"
		bytes int64    // bytes used afterwards
	}{
		{"settle release", []string{"settle", "release"}, 10},
		{"release settle", []string{"release", "settle"}, 10},
		{"giveback settle", []string{"giveback", "settle"}, 0},
		{"settle giveback", []string{"settle", "giveback"}, 10}, // a settled entry is not given back
		{"settle release settle giveback release", []string{"settle", "release", "settle", "giveback", "release"}, 10},
	}
	for i, s := range steps {
		subject := string(rune('a' + i))
		r := req(bytesOf(subject, 100, win(1000, time.Minute)), user(subject, conc(1)))
		clk.Set(time.Duration(i) * time.Hour)
		d, err := e.Allow(ctx, r)
		localOK(t, e, err)
		if !d.Allowed || slotState(t, d).Used != 1 || d.Windows[0].Used != 100 {
			t.Fatalf("%s: admission %+v", s.name, d)
		}
		den, err := e.Allow(ctx, r)
		localOK(t, e, err)
		if den.Allowed || !den.Denied.Window.Concurrent {
			t.Fatalf("%s: second while the first runs: %+v", s.name, den)
		}
		for _, op := range s.ops {
			switch op {
			case "settle":
				localOK(t, e, e.settle(ctx, r, d, []int64{10, -1}))
			case "release":
				localOK(t, e, e.release(ctx, r, d))
			case "giveback":
				localOK(t, e, e.giveBack(ctx, r, d))
			}
		}
		p, err := e.peek(ctx, r)
		localOK(t, e, err)
		if !p.Allowed || p.Windows[0].Used != s.bytes || slotState(t, p).Used != 0 {
			t.Fatalf("%s: afterwards %+v; want %d bytes and no slot used", s.name, p, s.bytes)
		}
		// One slot is free, not two.
		n, err := e.Allow(ctx, r)
		localOK(t, e, err)
		if !n.Allowed || n.Windows[0].Used != s.bytes+100 {
			t.Fatalf("%s: next request %+v", s.name, n)
		}
		den, err = e.Allow(ctx, r)
		localOK(t, e, err)
		if den.Allowed {
			t.Fatalf("%s: a second next request was admitted: %+v", s.name, den)
		}
		localOK(t, e, e.release(ctx, r, n))
	}
}

// TestComboSettleSlots runs comboSettleSlots on every backend, the
// fallback limiter (Source fromLocal) included.
func TestComboSettleSlots(t *testing.T) {
	t.Parallel()
	onEveryBackend(t, comboSettleSlots)
}

// TestComboCachedBlockSlots: a request with an in-flight window is never
// denied from the cache by its slots, but a block known to the cache
// denies it there (the block denies whatever the slots say, and only time
// or a Reset, which invalidates, ends it), reporting the windows as Redis
// does; another engine's Release meanwhile changes nothing, and a Reset
// elsewhere lifts the block at once.
func TestComboCachedBlockSlots(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	e := newEngine(t, rc, WithKeyPrefix(prefix))
	other := newEngine(t, rc, WithKeyPrefix(prefix))
	waitTrusted(t, e)
	ctx := context.Background()
	c := blocked(user("u", win(3, time.Hour), conc(1)), time.Hour)
	r := req(c)
	held, err := other.Allow(ctx, r)
	if err != nil || !held.Allowed {
		t.Fatalf("first: %+v, %v", held, err)
	}
	for i := range 3 { // the slot denies, from Redis every time, and blocks nothing
		d, err := e.Allow(ctx, r)
		if err != nil || d.Allowed || d.Blocked || d.Source != "redis" || !d.Denied.Window.Concurrent {
			t.Fatalf("slot denial %d: %+v, %v; want an unblocked denial from redis", i, d, err)
		}
	}
	if err := other.release(ctx, r, held); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // 3/h with the first: two more, the second keeps its slot
		d, err := e.Allow(ctx, r)
		if err != nil || !d.Allowed {
			t.Fatalf("admission %d: %+v, %v", i, d, err)
		}
		if i == 0 {
			if err := e.release(ctx, r, d); err != nil {
				t.Fatal(err)
			}
		} else {
			held = d
		}
	}
	// The rate is full and the slot held: the rate denial blocks.
	first, err := e.Allow(ctx, r)
	if err != nil || first.Allowed || !first.Blocked || first.Source != "redis" {
		t.Fatalf("over the rate with the slot held: %+v, %v; want a block set by redis", first, err)
	}
	peek, err := e.peek(ctx, r)
	if err != nil || !peek.Blocked || peek.Windows[1].Used != 1 {
		t.Fatalf("peek during the block: %+v, %v; want blocked, one slot used", peek, err)
	}
	for i := range 3 {
		d, err := e.Allow(ctx, r)
		if err != nil || d.Allowed || !d.Blocked || d.Source != "cache" {
			t.Fatalf("attempt %d during the block: %+v, %v; want a cached block", i, d, err)
		}
		if d.RetryAfter > time.Hour || d.RetryAfter < 59*time.Minute {
			t.Fatalf("attempt %d: retry %v, want about 1h", i, d.RetryAfter)
		}
		if len(d.Windows) != 2 || d.Windows[0] != first.Windows[0] && d.Windows[0].Used != 3 {
			t.Fatalf("attempt %d: windows %+v; want the rate window's 3", i, d.Windows)
		}
		// The cache never knows slots (they free at any moment, in any
		// process): a cached block reports none used, and none free.
		if d.Windows[1].Used != 0 || d.Windows[1].Remaining != 0 || d.Windows[1].Reset < 59*time.Minute {
			t.Errorf("attempt %d: cached slot window %+v, want 0 used, 0 free until the block ends (redis said %+v)", i, d.Windows[1], peek.Windows[1])
		}
	}
	if err := e.release(ctx, r, held); err != nil {
		t.Fatal(err)
	}
	if d, err := e.Allow(ctx, r); err != nil || d.Allowed || !d.Blocked {
		t.Fatalf("after the release during the block: %+v, %v; want still blocked", d, err)
	}
	if err := other.resetSubject(ctx, "s", c.Rule, "u"); err != nil {
		t.Fatal(err)
	}
	var d Decision
	for range 200 { // the invalidation reaches e
		if d, err = e.Allow(ctx, r); err == nil && d.Allowed {
			break
		}
		time.Sleep(5 * ms)
	}
	if err != nil || !d.Allowed || d.Blocked {
		t.Fatalf("after Reset elsewhere: %+v, %v; want admitted", d, err)
	}
}

// TestComboOutageSlots: while Redis is down, the FailLocal fallback holds
// slots in process (released by Release), the Release of a slot held in
// Redis is queued, and the renewal of slots held in Redis neither spins
// nor logs a line per period; Close stops the renewal goroutine.
func TestComboOutageSlots(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	h := &recordHandler{}
	const lease = 90 * ms // renewed every 30 ms
	lost := make(chan SlotLost, 10)
	e, err := New(rc, WithKeyPrefix(redistest.Prefix(t)), WithTimeout(time.Second), WithFailMode(rules.FailLocal),
		WithLease(lease), WithLogger(slog.New(h)), WithSlotLost(func(l SlotLost) { lost <- l }))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	r := req(user("u", win(100, time.Minute), conc(2)))
	held, err := e.Allow(ctx, r)
	if err != nil || !held.Allowed || held.Source != "redis" {
		t.Fatalf("before the outage: %+v, %v", held, err)
	}
	s.Kill()
	var local []Decision
	for i := range 3 { // the fallback knows nothing of the slot held in Redis
		d, err := e.Allow(ctx, r)
		if d.Source != "local" || !errors.Is(err, ErrBackend) || d.Allowed != (i < 2) {
			t.Fatalf("request %d while down: %+v, %v", i, d, err)
		}
		local = append(local, d)
	}
	if !local[2].Denied.Window.Concurrent {
		t.Fatalf("third while down: %+v; want denied by the in-flight window", local[2])
	}
	if err := e.release(ctx, r, local[0]); err != nil {
		t.Fatalf("Release of a local decision: %v", err)
	}
	if d, _ := e.Allow(ctx, r); !d.Allowed || d.Source != "local" {
		t.Fatalf("after a local release: %+v", d)
	}
	if d, _ := e.Allow(ctx, r); d.Allowed {
		t.Fatalf("a local release freed two slots: %+v", d)
	}
	time.Sleep(20 * lease / 3) // 20 renewal periods of held's slot
	if n := len(h.matching("renewal")); n > 2 {
		t.Errorf("%d renewal lines in 20 renewal periods of an outage, want at most 2", n)
	}
	if err := e.release(ctx, r, local[1]); err != nil {
		t.Fatal(err)
	}
	// Renewal resumes once the server answers: the restarted server (no
	// persistence) lost held's slot, which the renewal reports.
	s.Restart()
	select {
	case l := <-lost:
		if !strings.HasSuffix(l.Key, plan.SlotSuffix) {
			t.Errorf("lost slot %+v", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal reported the slot the restart lost")
	}
	if err := e.release(ctx, r, held); err != nil {
		t.Fatalf("Release of a lost slot: %v", err)
	}
	e.Close()
	select {
	case <-e.slots.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the renewal goroutine outlived Close")
	}
}

// comboPeekBlockSlots: Peek of user:1/min,1 concurrent; block:1h reports
// the slots used and a block in force, and never writes: it takes no slot
// and starts no block where Allow would.
func comboPeekBlockSlots(t *testing.T, e *Engine, clk *redistest.Clock) {
	t.Helper()
	ctx := context.Background()
	r := req(blocked(user("u", win(1, time.Minute), conc(1)), time.Hour))
	at := func(d time.Duration, peek bool) Decision {
		t.Helper()
		clk.Set(d)
		f := e.Allow
		if peek {
			f = e.peek
		}
		dec, err := f(ctx, r)
		localOK(t, e, err)
		return dec
	}
	if p := at(0, true); !p.Allowed || slotState(t, p).Used != 0 {
		t.Fatalf("peek of nothing: %+v", p)
	}
	x := at(0, false)
	if !x.Allowed {
		t.Fatalf("first: %+v", x)
	}
	for range 2 { // rate and slot full: a peek starts no block
		if p := at(time.Second, true); p.Allowed || p.Blocked || slotState(t, p).Used != 1 || p.Windows[0].Used != 1 {
			t.Fatalf("peek with both full: %+v", p)
		}
	}
	localOK(t, e, e.release(ctx, r, x))
	if p := at(2*time.Second, true); p.Allowed || p.Blocked || slotState(t, p).Used != 0 {
		t.Fatalf("peek after the release: %+v", p)
	}
	y := at(time.Minute, false) // no block was started: admitted once x left
	if !y.Allowed {
		t.Fatalf("after the peeks, once the rate has room: %+v; a peek blocked", y)
	}
	if d := at(time.Minute+time.Second, false); d.Allowed || !d.Blocked {
		t.Fatalf("over the rate: %+v; want blocked", d)
	}
	p := at(time.Minute+2*time.Second, true)
	if p.Allowed || !p.Blocked || slotState(t, p).Used != 1 || slotState(t, p).Remaining != 0 || p.RetryAfter != time.Hour-time.Second {
		t.Fatalf("peek during the block with y running: %+v", p)
	}
	localOK(t, e, e.release(ctx, r, y))
	if p := at(2*time.Hour, true); !p.Allowed || p.Blocked || slotState(t, p).Used != 0 {
		t.Fatalf("peek after the block: %+v", p)
	}
	if d := at(2*time.Hour, false); !d.Allowed || slotState(t, d).Used != 1 {
		t.Fatalf("after the block: %+v; want admitted (peeks took no slot)", d)
	}
}

// TestComboPeekBlockSlots runs comboPeekBlockSlots on every backend.
func TestComboPeekBlockSlots(t *testing.T) {
	t.Parallel()
	onEveryBackend(t, comboPeekBlockSlots)
}

// TestComboClusterMasterDownSlots: on a 3-master cluster with one master
// stopped, the slots held on the other masters are still renewed, those on
// the stopped one are not asked for, and the outage logs no renewal line
// per period.
func TestComboClusterMasterDownSlots(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterConfig(t, redistest.ClusterConfig{})
	ctx := context.Background()
	cc := cl.ClientWith(t, &redis.ClusterOptions{ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1,
		ClusterStateReloadInterval: 200 * time.Millisecond})
	prefix := redistest.Prefix(t)
	h := &recordHandler{}
	lost := make(chan SlotLost, 10)
	// A stopped master refuses connections at once, so the test needs no
	// short timeout; 100 ms timed out the first Allow on a loaded machine.
	// The lease stays above three timeouts (see WithLease).
	const timeout, lease = 400 * ms, 1500 * ms // renewed every 500 ms
	e := newEngine(t, cc, WithKeyPrefix(prefix), WithTimeout(timeout), WithLease(lease), WithLogger(slog.New(h)),
		WithSlotLost(func(l SlotLost) { lost <- l }))
	var a, b Request
	var ma, mb *redistest.Server
	for i := 0; mb == nil; i++ {
		r := req(user("s"+strconv.Itoa(i), conc(1)))
		m := cl.MasterOf(t, e.keyOf("s", r.Checks[0])+plan.SlotSuffix)
		switch {
		case ma == nil:
			a, ma = r, m
		case m != ma:
			b, mb = r, m
		}
	}
	da, db := mustAllow(t, e, a, true), mustAllow(t, e, b, true)
	ma.Kill()
	if d, err := e.Allow(ctx, a); d.Source == "redis" || !errors.Is(err, ErrBackend) {
		t.Fatalf("a on the stopped master: %+v, %v", d, err)
	}
	time.Sleep(3 * lease) // 9 renewal periods, 3 leases
	select {
	case l := <-lost:
		t.Fatalf("slot lost while its master runs: %+v", l)
	default:
	}
	// Ask until Redis answers: right after a master's death a call to a
	// live one can still time out (the cluster client reloading its state,
	// a loaded machine), and the fallback then decides.
	var d Decision
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * ms) {
		if d, err = e.Allow(ctx, b); d.Source == "redis" {
			break
		}
	}
	if err != nil || d.Allowed || d.Source != "redis" || !d.Denied.Window.Concurrent {
		t.Fatalf("b after 3 leases: %+v, %v; want its slot still held", d, err)
	}
	if n := len(h.matching("renewal")); n > 2 {
		t.Errorf("%d renewal lines in 9 renewal periods, want at most 2", n)
	}
	if err := e.release(ctx, b, db); err != nil {
		t.Fatal(err)
	}
	mustAllow(t, e, b, true)
	_ = e.release(ctx, a, da) // queued: its master is down
}

// TestComboReleaseHungServer: Releases, GiveBacks and Settles that meet a
// server that stopped answering (before any Allow found it down) each fail
// with ErrBackend, but log at most one line together, not one per request.
func TestComboReleaseHungServer(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	h := &recordHandler{}
	// Each call on the hung server waits for the timeout; 50 ms timed out
	// the Allows before the hang on a loaded machine.
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithTimeout(500*ms), WithLogger(slog.New(h)))
	ctx := context.Background()
	r := req(bytesOf("u", 10, win(1000, time.Minute)), user("u", conc(6)))
	var ds []Decision
	for range 6 {
		ds = append(ds, mustAllow(t, e, r, true))
	}
	if err := syscall.Kill(s.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(s.Pid(), syscall.SIGCONT) })
	for i, d := range ds {
		var err error
		switch i % 3 {
		case 0:
			err = e.release(ctx, r, d)
		case 1:
			err = e.giveBack(ctx, r, d)
		case 2:
			err = e.settle(ctx, r, d, []int64{1, -1})
		}
		if !errors.Is(err, ErrBackend) {
			t.Fatalf("call %d on a hung server: %v, want ErrBackend", i, err)
		}
	}
	if n := len(h.matching("failed; retried")); n > 1 {
		t.Errorf("%d lines for 6 failed removals, want at most 1", n)
	}
}
