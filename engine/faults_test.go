package engine

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/lua"
	"github.com/slidelimit/slidelimit/rules"
)

// TestLeaderPanic checks that a batch whose run panics (a panicking
// client, hook or wrapper) neither strands the callers queued behind it nor
// leaks an in-flight slot, and that a background probe that panics does
// not leave every later call on the fail mode.
func TestLeaderPanic(t *testing.T) {
	t.Parallel()
	// A server that accepts connections, so that the probe, which dials
	// before it asks (see probePing), reaches the client's hook.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	rc := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var panics atomic.Int32
	panics.Store(1)
	rc.AddHook(processHook(func(next redis.ProcessHook) redis.ProcessHook {
		return func(ctx context.Context, cmd redis.Cmder) error {
			if panics.Add(-1) == 0 {
				entered <- struct{}{}
				<-release
				panic("boom")
			}
			return errors.New("no redis")
		}
	}))
	// Its INFO and its subscription would take the panic.
	e := newEngine(t, rc, WithFailMode(rules.FailClosed), withEvictionCheck(0), WithCachedDenials(false))
	e.batch.maxInflight = 1
	r := req(user("u", win(10, time.Minute)))

	// A batch leader that panics: the calls queued behind it return.
	leader := make(chan any)
	go func() {
		defer func() { leader <- recover() }()
		e.Allow(context.Background(), r)
	}()
	<-entered
	queued := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := e.Allow(context.Background(), r)
			queued <- err
		}()
	}
	for { // wait until both are queued
		e.batch.mu.Lock()
		n := len(e.batch.queue)
		e.batch.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(ms)
	}
	close(release)
	if p := <-leader; p != "boom" {
		t.Errorf("leader recovered %v, want the panic", p)
	}
	for range 2 {
		select {
		case err := <-queued:
			if !errors.Is(err, ErrBackend) {
				t.Errorf("queued call: %v, want ErrBackend", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a call queued behind a panicking batch never returned")
		}
	}
	e.batch.mu.Lock()
	inflight := e.batch.inflight
	e.batch.mu.Unlock()
	if inflight != 0 {
		t.Errorf("%d batches in flight after all calls returned", inflight)
	}

	// A background probe whose client panics neither crashes the process
	// nor leaves the server down: calls ask it again.
	e.doms.MarkDown(e.doms.One, errors.New("test"))
	panics.Store(1) // release is closed: the next Process panics at once
	<-entered
	redistest.Eventually(t, "the server up after its probe panicked", func() bool {
		return !e.doms.One.Down.Load() && !e.doms.One.Probing.Load()
	})
}

// busy blocks the server for d with a script (other clients' commands wait
// in their sockets) and returns when the script has started.
func busy(t *testing.T, addr string, d time.Duration) <-chan error {
	t.Helper()
	bc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { bc.Close() })
	bc.Ping(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- bc.Eval(context.Background(), `
local s = redis.call('TIME')
local start = s[1] * 1000000 + s[2]
while true do
  local n = redis.call('TIME')
  if n[1] * 1000000 + n[2] - start >= tonumber(ARGV[1]) then return 1 end
end`, nil, d.Microseconds()).Err()
	}()
	// Wait until the server stops answering: the script runs.
	pc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer pc.Close()
	fails := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 50*ms)
		err := pc.Ping(ctx).Err()
		cancel()
		if fails++; err == nil {
			fails = 0
		}
		if fails == 2 {
			return done
		}
		time.Sleep(ms)
	}
}

// TestTimedOutReservation checks that a request that timed out after Redis
// had counted it, and was then denied by its fail mode, does not stay
// counted in Redis.
func TestTimedOutReservation(t *testing.T) {
	t.Parallel()
	s, _ := redistest.StartClient(t)
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	e := newEngine(t, rc, WithKeyPrefix(prefix), WithTimeout(100*ms), WithFailMode(rules.FailClosed))
	r := req(user("u", win(10, time.Minute)), ip("1.2.3.4", win(10, time.Minute)))
	// Loads the script; on a starved machine (the suite runs in parallel
	// under -race) this first call may itself outlast the 100 ms.
	untilRedis(t, func() (Decision, error) {
		return e.Allow(context.Background(), req(user("warm", win(10, time.Minute))))
	})

	done := busy(t, s.Addr, 700*ms)
	d, err := e.Allow(context.Background(), r)
	if !isTimeout(err) || d.Allowed || d.Source != "fail-closed" {
		t.Fatalf("Allow during the busy script: %v %v %v", d.Allowed, d.Source, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The timed-out script ran once the busy one ended. Its undo runs
	// after the next script call, within that call's timeout, and is
	// retried after each later one until it succeeds: on a loaded machine
	// the first try may run out of time.
	deadline := time.Now().Add(5 * time.Second)
	for {
		untilRedis(t, func() (Decision, error) {
			return e.Allow(context.Background(), req(user("other", win(10, time.Minute))))
		})
		left := 0
		for _, c := range r.Checks {
			left += len(entries(t, rc, e.keyOf("s", c)))
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * ms)
	}
	for _, c := range r.Checks {
		if got := entries(t, rc, e.keyOf("s", c)); len(got) != 0 {
			t.Errorf("%s: %d entries of a request that was denied", c.Kind, len(got))
		}
	}
}

// clusterTimedOut checks that a slot call that timed out after its node
// had counted the request leaves no entry once Redis answers again, and
// that the other slot's reservation is rolled back at once.
func clusterTimedOut(t *testing.T, cl *redistest.Cluster) {
	prefix := redistest.Prefix(t)
	afterClusterTTLs(t, cl, prefix)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { cc.Close() })
	e := newEngine(t, cc, WithKeyPrefix(prefix), WithTimeout(100*ms), WithFailMode(rules.FailClosed))
	ctx := context.Background()
	// Two subjects whose keys live on different nodes.
	a := user("a", win(10, time.Minute))
	node := func(c Check) string {
		m, err := cc.MasterForKey(ctx, e.keyOf("s", c))
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	var b Check
	for i := 0; ; i++ {
		b = ip(strconv.Itoa(i), win(10, time.Minute))
		if node(b) != node(a) {
			break
		}
	}
	r := req(a, b)
	// The first call loads the Function on every master, which a loaded
	// machine may not finish within the 100 ms timeout.
	untilRedis(t, func() (Decision, error) { return e.Allow(ctx, req(user("warm", win(10, time.Minute)))) })
	for _, n := range cl.Nodes { // load the script everywhere
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		c.ScriptLoad(ctx, lua.Script("multi_window"))
		c.Close()
	}

	done := busy(t, node(a), 700*ms)
	d, err := e.Allow(ctx, r)
	if !isTimeout(err) || d.Allowed {
		t.Fatalf("Allow during the busy script: %v %v %v", d.Allowed, d.Source, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A peek on both nodes runs their undos.
	untilRedis(t, func() (Decision, error) { return e.peek(ctx, r) })
	// b's node answered the reservation, but go-redis reported its reply
	// lost with a's timeout; a's node ran it after the busy script.
	for _, c := range r.Checks {
		if got := entries(t, cc, e.keyOf("s", c)); len(got) != 0 {
			t.Errorf("%s: %d entries of a request that was denied", c.Kind, len(got))
		}
	}
}

// TestClockBack checks that a server clock that goes back (an NTP step, a
// failover to a replica whose clock is behind) never makes a window forget
// the requests admitted "in its future", and that such a key keeps a TTL.
func TestClockBack(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	clk := redistest.NewClock()
	e := newEngine(t, rc, WithKeyPrefix(prefix), WithClock(clk.Now))
	r := req(user("u", win(1, time.Minute)))
	clk.Set(100 * time.Second)
	mustAllow(t, e, r, true)
	clk.Set(99 * time.Second)
	d := mustAllow(t, e, r, false)
	if d.Windows[0].Used != 1 || d.RetryAfter != 61*time.Second {
		t.Errorf("1 s back: used %d retry %v, want 1 and 61s", d.Windows[0].Used, d.RetryAfter)
	}
}

// TestPersistedKey checks that a key that lost its deadline (PERSIST, a
// restore without TTL) gets one again at its next bookkeeping.
func TestPersistedKey(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	clk := redistest.NewClock()
	e := newEngine(t, rc, WithKeyPrefix(prefix), WithClock(clk.Now))
	r := req(user("u", win(10, time.Second)))
	mustAllow(t, e, r, true)
	key := e.keyOf("s", r.Checks[0])
	if err := rc.Persist(context.Background(), key).Err(); err != nil {
		t.Fatal(err)
	}
	clk.Set(11 * time.Second) // next epoch (I = the 10 s window)
	mustAllow(t, e, r, true)
	if d := rc.PTTL(context.Background(), key).Val(); d <= 0 {
		t.Errorf("PTTL %v after the next epoch's admission", d)
	}
}

// untilRedis calls decide until Redis decides again, for at most 5 s.
func untilRedis(t *testing.T, decide func() (Decision, error)) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := decide()
		if err == nil && d.Source == "redis" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis does not answer again: %v", err)
		}
		time.Sleep(20 * ms)
	}
}

// processHook is a go-redis hook that wraps only Process.
type processHook func(next redis.ProcessHook) redis.ProcessHook

func (h processHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h processHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return h(next)
}
func (h processHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
