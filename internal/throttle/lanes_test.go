package throttle

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// laneLimiter returns a Limiter on a miniredis of its own.
func laneLimiter(t *testing.T, opts ...Option) *testLimiter {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	lim, err := newLimiter(c, append([]Option{WithEngineOptions(engine.WithTimeout(2 * time.Second))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

// lanes returns how many lanes t keeps, and checks that its maps and
// lists agree.
func (t *Throttle) laneCount(tb testing.TB) int {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lanes) != len(t.byID) {
		tb.Errorf("%d lanes by key, %d by id", len(t.lanes), len(t.byID))
	}
	n := 0
	for ln := t.reg.head; ln != nil; ln = ln.ref.next {
		n++
	}
	if n != t.reg.idle {
		tb.Errorf("the idle list holds %d lanes, counted %d", n, t.reg.idle)
	}
	return len(t.lanes)
}

// Lanes no one uses are freed past idleLanes: the lanes kept are bounded
// whatever the number of keys used.
func TestThrottleLanesFreed(t *testing.T) {
	lim := laneLimiter(t)
	th, err := lim.Throttle("api", "key(k):100000/s")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const keys = idleLanes + 500
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < keys; i += 4 {
				p, err := th.Wait(ctx, Call{Keys: map[string]string{"k": "key-" + strconv.Itoa(i)}})
				if err != nil {
					t.Error(err)
					return
				}
				p.Finish(nil)
			}
		})
	}
	wg.Wait()
	if n := th.laneCount(t); n != idleLanes {
		t.Errorf("%d lanes kept after %d keys were used and finished, want the %d idle ones", n, keys, idleLanes)
	}
	// A lane in use is never freed: its callers and Permits share it.
	held, err := th.Wait(ctx, Call{Keys: map[string]string{"k": "held"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range idleLanes + 10 {
		p, err := th.Wait(ctx, Call{Keys: map[string]string{"k": "other-" + strconv.Itoa(i)}})
		if err != nil {
			t.Fatal(err)
		}
		p.Finish(nil)
	}
	th.mu.Lock()
	ln := th.lanes[held.lane.key]
	th.mu.Unlock()
	if ln != held.lane {
		t.Fatal("the lane of an unfinished Permit was freed")
	}
	held.Finish(nil)
	if n := th.laneCount(t); n != idleLanes {
		t.Errorf("%d lanes kept, want %d", n, idleLanes)
	}
}

// The maps of the lanes are made anew once they shrank to a quarter of
// their peak: Go maps never give back their room.
func TestThrottleLaneMapsShrink(t *testing.T) {
	lim := laneLimiter(t)
	th, err := lim.Throttle("api", "key(k):100/s")
	if err != nil {
		t.Fatal(err)
	}
	th.fleet.client = nil // no Redis read per lane: this test is about memory
	const n = 4*idleLanes + 100
	lanes := make([]*lane, n)
	for i := range lanes {
		if lanes[i], err = th.lane(context.Background(), "lane-"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if c := th.laneCount(t); c != n {
		t.Fatalf("%d lanes in use, want %d", c, n)
	}
	for _, ln := range lanes {
		th.release(ln)
	}
	if c := th.laneCount(t); c != idleLanes {
		t.Errorf("%d lanes kept, want %d", c, idleLanes)
	}
	th.mu.Lock()
	peak := th.reg.peak
	th.mu.Unlock()
	if peak >= n {
		t.Errorf("the maps were not made anew: peak %d", peak)
	}
}

// slowScripter answers every script call once release is closed.
type slowScripter struct {
	redis.Scripter
	release chan struct{}
}

func (s slowScripter) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	<-s.release
	cmd := redis.NewCmd(ctx)
	cmd.SetVal([]any{int64(0), int64(-1), int64(0), int64(-2), int64(0), time.Now().UnixMicro()})
	return cmd
}

// Callers that find a new lane reading the fleet's state wait for that
// read, or for their context: they would otherwise ask at once ahead of
// other processes' waiters.
func TestThrottleNewLaneReadFirst(t *testing.T) {
	lim := laneLimiter(t)
	th, err := lim.Throttle("api", "key(k):100/s")
	if err != nil {
		t.Fatal(err)
	}
	slow := slowScripter{release: make(chan struct{})}
	th.fleet.client = slow
	ctx := context.Background()
	first := make(chan *lane)
	go func() {
		ln, _ := th.lane(ctx, "k")
		first <- ln
	}()
	// The first caller made the lane and reads; later ones wait.
	for {
		th.mu.Lock()
		made := th.lanes["k"] != nil
		th.mu.Unlock()
		if made {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := th.lane(cctx, "k"); err == nil {
		t.Fatal("a caller got a lane that was still reading the fleet's state")
	}
	second := make(chan *lane)
	go func() {
		ln, _ := th.lane(ctx, "k")
		second <- ln
	}()
	close(slow.release)
	a, b := <-first, <-second
	if a != b {
		t.Fatal("two lanes for one key")
	}
	th.release(a)
	th.release(b)
	th.mu.Lock()
	users := a.ref.users
	th.mu.Unlock()
	if users != 0 {
		t.Errorf("the lane has %d users, want 0 (the caller whose context ended released it)", users)
	}
}

// An idle lane stays known: a key used again and again, one call at a
// time, reads the fleet's queue and block once, not at every call.
func TestThrottleIdleLaneKept(t *testing.T) {
	lim := laneLimiter(t)
	th, err := lim.Throttle("api", "key(k):100000/s")
	if err != nil {
		t.Fatal(err)
	}
	const calls = 50
	for range calls {
		p, err := th.Wait(context.Background(), Call{Keys: map[string]string{"k": "one"}})
		if err != nil {
			t.Fatal(err)
		}
		p.Finish(nil)
	}
	if n := th.Stats().RedisCalls; n != calls+1 {
		t.Errorf("%d calls one at a time made %d Redis calls, want %d (a decision each and one read of the lane)", calls, n, calls+1)
	}
	if n := th.laneCount(t); n != 1 {
		t.Errorf("%d lanes kept, want 1", n)
	}
}

// An upstream block keeps its lane past idleLanes until it ends, so that
// a process whose client cannot share it in Redis does not forget it.
func TestThrottleBlockedLaneKept(t *testing.T) {
	lim := laneLimiter(t)
	th, err := lim.Throttle("api", "key(k):100000/s")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := th.Wait(ctx, Call{Keys: map[string]string{"k": "blocked"}})
	if err != nil {
		t.Fatal(err)
	}
	th.fleet.block(p.lane, time.Minute)
	blocked := p.lane
	p.Finish(nil)
	for i := range idleLanes + 10 {
		p, err := th.Wait(ctx, Call{Keys: map[string]string{"k": "other-" + strconv.Itoa(i)}})
		if err != nil {
			t.Fatal(err)
		}
		p.Finish(nil)
	}
	th.mu.Lock()
	kept := th.lanes[blocked.key] == blocked
	th.mu.Unlock()
	if !kept {
		t.Fatal("a blocked lane was freed before its block ended")
	}
	// As if the minute had passed.
	th.mu.Lock()
	blocked.mu.Lock()
	blocked.blocked = time.Now()
	blocked.mu.Unlock()
	th.reg.heldNext = time.Now()
	th.mu.Unlock()
	p, err = th.Wait(ctx, Call{Keys: map[string]string{"k": "after"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Finish(nil)
	th.mu.Lock()
	kept = th.lanes[blocked.key] != nil
	th.mu.Unlock()
	if kept {
		t.Error("a blocked lane was kept after its block ended")
	}
	if n := th.laneCount(t); n != idleLanes {
		t.Errorf("%d lanes kept, want %d", n, idleLanes)
	}
}

// A long key value is kept as its hash: a lane does not keep it alive.
func TestThrottleLaneHashesLongKeys(t *testing.T) {
	lim := laneLimiter(t)
	th, err := lim.Throttle("api", "key(k):100/s; global:1000/s")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 1<<20)
	p, err := th.Wait(context.Background(), Call{Keys: map[string]string{"k": long}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Finish(nil)
	ln := p.lane
	if len(ln.key) > 100 {
		t.Errorf("the lane's key holds %d bytes for a key value of 1 MiB", len(ln.key))
	}
	want := []string{laneSubject("key:" + long), "global"}
	if len(ln.subjects) != 2 || ln.subjects[0] != want[0] || ln.subjects[1] != want[1] {
		t.Errorf("the lane's subjects are %q, want %q", ln.subjects, want)
	}
	if !strings.HasPrefix(ln.subjects[0], "#") || len(ln.subjects[0]) != 44 {
		t.Errorf("a long subject is kept as %q, want # and a base64url SHA-256", ln.subjects[0])
	}
	// Another long value has a lane of its own.
	q, ok, err := th.Allow(context.Background(), Call{Keys: map[string]string{"k": long[1:] + "y"}})
	if err != nil || !ok {
		t.Fatalf("Allow = %v, %v", ok, err)
	}
	defer q.Finish(nil)
	if q.lane == ln {
		t.Error("two long key values share a lane")
	}
}

// Lane keys are injective: key values that differ only in where a NUL
// sits never share a lane, nor a learned block.
func TestThrottleLaneKeysInjective(t *testing.T) {
	lim := laneLimiter(t)
	th, err := lim.Throttle("api", "key(x):100/s; key(y):100/s")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := Call{Keys: map[string]string{"x": "a\x00key:b", "y": "c"}}
	b := Call{Keys: map[string]string{"x": "a", "y": "b\x00key:c"}}
	p, err := th.Wait(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	th.fleet.block(p.lane, time.Minute)
	p.Finish(nil)
	if _, ok, err := th.Allow(ctx, a); ok || err != nil {
		t.Fatalf("the blocked call was admitted: %v, %v", ok, err)
	}
	q, ok, err := th.Allow(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("a call whose keys differ only in where a NUL sits was held by the other's block")
	}
	q.Finish(nil)
	for _, s := range [][]string{{"a\x00b", "c"}, {"a", "\x00bc"}, {"", "x"}, {"x", ""}} {
		got := laneSubjects(laneKey(&engine.Request{Checks: []engine.Check{{Subject: s[0]}, {Subject: s[1]}}}))
		if len(got) != 2 || got[0] != s[0] || got[1] != s[1] {
			t.Errorf("laneSubjects(laneKey(%q)) = %q", s, got)
		}
	}
	// Run-time limits follow the subjects: they split lanes and are not
	// read back as subjects.
	dyn := func(limit int64) *engine.Request {
		w := rules.Window{Limit: limit, Period: time.Minute, LimitFunc: "quota"}
		return &engine.Request{Checks: []engine.Check{{Subject: "k", Rule: rules.Rule{Kind: rules.Global, Windows: []rules.Window{w}}}}}
	}
	if laneKey(dyn(1)) == laneKey(dyn(100)) {
		t.Error("calls with different run-time limits share a lane")
	}
	if got := laneSubjects(laneKey(dyn(300))); len(got) != 1 || got[0] != "k" {
		t.Errorf("laneSubjects of a key with run-time limits = %q, want [k]", got)
	}
}

// A Permit dropped without Finish is finished once the garbage collector
// finds it unreachable, and logged once for many.
func TestThrottleDroppedPermitFinished(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	lim := laneLimiter(t, WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))))
	th, err := lim.Throttle("api", "key(k):1 concurrent")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := Call{Keys: map[string]string{"k": "one"}}
	for range 3 {
		drop(t, th, call)
		waitAdmitted(t, th, call)
	}
	mu.Lock()
	n := strings.Count(logs.String(), "without Finish")
	mu.Unlock()
	if n != 1 {
		t.Errorf("%d lines about dropped Permits, want 1:\n%s", n, logs.String())
	}
	if th.laneCount(t) != 1 {
		t.Error("the lane count is not 1")
	}
	th.mu.Lock()
	users := th.lanes[string(laneKeyOf(t, th, call))].ref.users
	th.mu.Unlock()
	if users != 0 {
		t.Errorf("the lane has %d users after its Permits were finished", users)
	}
	_ = ctx
}

// A Transport response whose body is never closed finishes its Permit
// once it is unreachable.
func TestThrottleTransportUnclosedBody(t *testing.T) {
	lim := laneLimiter(t)
	th, err := lim.Throttle("api", "global:1 concurrent")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	client := &http.Client{Transport: th.Transport(srv.Client().Transport, TransportConfig{})}
	get := func() {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.StatusCode // the body is never closed
	}
	get()
	waitAdmitted(t, th, Call{})
	get()
	waitAdmitted(t, th, Call{})
}

// handle stands for what a caller holds of a Permit, as the root
// package's Permit does: a cleanup finishes the Permit once the handle is
// unreachable.
type handle struct{ p *Permit }

// drop has th admit call and drops its handle unfinished.
//
//go:noinline
func drop(t *testing.T, th *Throttle, call Call) {
	t.Helper()
	p, err := th.Wait(context.Background(), call)
	if err != nil {
		t.Fatal(err)
	}
	h := &handle{p: p}
	runtime.AddCleanup(h, (*Permit).Dropped, p)
}

// waitAdmitted collects garbage until th admits call, and finishes it.
func waitAdmitted(t *testing.T, th *Throttle, call Call) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		runtime.GC()
		p, ok, err := th.Allow(context.Background(), call)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			p.Finish(nil)
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a dropped Permit still holds its slot after 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func laneKeyOf(t *testing.T, th *Throttle, c Call) string {
	t.Helper()
	req, _, err := th.plan().request(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return laneKey(&req)
}

// A Permit kept unfinished releases its slot at the maximum hold; its
// Finish still settles its costs.
func TestThrottleMaxHold(t *testing.T) {
	const hold = 300 * time.Millisecond
	lim := laneLimiter(t, WithMaxHold(hold))
	th, err := lim.Throttle("api", "key(k):1 concurrent; key(k)[tokens]:100/min")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := Call{Keys: map[string]string{"k": "one"}, Costs: map[string]int64{"tokens": 50}}
	start := time.Now()
	p, err := th.Wait(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	q, err := th.Wait(wctx, call)
	if err != nil {
		t.Fatalf("the slot of a Permit held past the maximum hold was not released: %v", err)
	}
	if waited := time.Since(start); waited < hold {
		t.Errorf("admitted after %v, before the maximum hold %v", waited, hold)
	}
	// p settles to 0 tokens: 50 of 100 are used (q), so a call of 50 fits.
	p.Finish(map[string]int64{"tokens": 0})
	q.Finish(nil)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, ok, err := th.Allow(ctx, call)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			r.Finish(nil)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Finish of a Permit past its maximum hold did not settle its costs")
		}
		time.Sleep(5 * time.Millisecond)
	}
	runtime.KeepAlive(p)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
