package engine

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// flushDuring runs callers Allow loops for d while flush runs every 10 ms,
// and fails on any error or non-Redis decision.
func flushDuring(t *testing.T, e *Engine, flush func() error, d time.Duration) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if err := flush(); err != nil {
					t.Errorf("SCRIPT FLUSH: %v", err)
					return
				}
			}
		}
	}()
	reqs := []Request{
		req(user("a", win(1000, time.Second)), ip("1.1.1.1", win(1000, time.Second))),
		req(user("b", win(1000, time.Second), win(5000, time.Minute))),
	}
	n := hammer(t, []*Engine{e}, 16, d, func(i int) Request { return reqs[i%2] })
	close(stop)
	wg.Wait()
	if n == 0 {
		t.Fatal("nothing admitted")
	}
}

// TestScriptFlush flushes the script cache while callers run: NOSCRIPT
// must never reach them. (TestCluster does the same on a cluster.)
func TestScriptFlush(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	e := newEngine(t, rc, WithKeyPrefix(prefix))
	flushDuring(t, e, func() error { return rc.ScriptFlush(context.Background()).Err() }, time.Second)
}

// TestKill checks each fail mode while redis-server is down, and that
// decisions come from Redis again after a restart, with the same Engine.
func TestKill(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	for _, tc := range []struct {
		mode    rules.FailMode
		source  source
		allowed []bool // three requests against a limit of 2
	}{
		{rules.FailOpen, fromFailOpen, []bool{true, true, true}},
		{rules.FailClosed, fromFailClosed, []bool{false, false, false}},
		{rules.FailLocal, fromLocal, []bool{true, true, false}},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			s, rc := redistest.StartClient(t)
			prefix := redistest.Prefix(t)
			e := newEngine(t, rc, WithKeyPrefix(prefix), WithTimeout(timeout), WithFailMode(tc.mode))
			r := req(user("u", win(2, time.Minute)))
			r.Fail = rules.FailDefault
			mustAllow(t, e, req(user("other", win(2, time.Minute))), true)

			s.Kill()
			for i, want := range tc.allowed {
				start := time.Now()
				d, err := e.Allow(context.Background(), r)
				if el := time.Since(start); el > timeout+100*ms {
					t.Errorf("call %d took %v, timeout %v", i, el, timeout)
				}
				if !errors.Is(err, ErrBackend) {
					t.Errorf("call %d: err %v, want ErrBackend", i, err)
				}
				var be *backendError
				if !errors.As(err, &be) || be.Op != "allow" {
					t.Errorf("call %d: err %v is not a *backendError for allow", i, err)
				}
				if d.Source != tc.source.String() || d.Allowed != want {
					t.Errorf("call %d: source %v allowed %v, want %v %v", i, d.Source, d.Allowed, tc.source, want)
				}
				if tc.mode == rules.FailLocal && (len(d.Windows) != 1 || d.Windows[0].Used != min(int64(i+1), 2)) {
					t.Errorf("call %d: local windows %+v", i, d.Windows)
				}
			}
			// The request's own fail mode wins over the engine's.
			r.Fail = rules.FailOpen
			if d, _ := e.Allow(context.Background(), r); d.Source != "fail-open" {
				t.Errorf("request fail mode open: source %v", d.Source)
			}

			s.Restart()
			afterTTLs(t, rc, prefix)
			deadline := time.Now().Add(10 * time.Second)
			for {
				d, err := e.Allow(context.Background(), r)
				if err == nil && d.Source == "redis" {
					if !d.Allowed || d.Windows[0].Used != 1 {
						t.Errorf("after restart: %+v", d)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no decision from Redis 10s after the restart: %v %v", d.Source, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// TestHang checks the timeout against a server that accepts connections
// and never answers, and that once it timed out the calls do not wait for
// it.
func TestHang(t *testing.T) {
	t.Parallel()
	rc := hangingClient(t)
	const timeout = 100 * time.Millisecond
	e := newEngine(t, rc, WithTimeout(timeout), WithFailMode(rules.FailLocal))
	r := req(user("u", win(10, time.Minute)))

	start := time.Now()
	d, err := e.Allow(context.Background(), r)
	if el := time.Since(start); el < timeout || el > timeout+200*ms {
		t.Errorf("first call took %v, timeout %v", el, timeout)
	}
	if !isTimeout(err) || d.Source != "local" || !d.Allowed {
		t.Fatalf("first call: %v %v %v", d.Source, d.Allowed, err)
	}

	// Redis is now considered down: calls decide at once, without the
	// network, while a background probe asks it again.
	for i := range 5 {
		start = time.Now()
		d, err = e.Allow(context.Background(), r)
		if el := time.Since(start); el > timeout/2 {
			t.Errorf("call %d while down took %v", i, el)
		}
		if !errors.Is(err, errNotAsked) || !errors.Is(err, ErrBackend) || d.Source != "local" {
			t.Errorf("call %d while down: %v %v", i, d.Source, err)
		}
	}
	if !e.doms.One.Probing.Load() {
		t.Error("no background probe while down")
	}
}

// hangingClient returns a client of a server that accepts connections and
// never answers.
func hangingClient(t *testing.T) *redis.Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	rc := redis.NewClient(&redis.Options{Addr: l.Addr().String(), ContextTimeoutEnabled: true, MaxRetries: -1, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { rc.Close() })
	return rc
}

// TestHangQueued checks that calls queued behind calls that time out do
// not wait for a timeout of their own: the timeout marks Redis down before
// the queue is handed on, and a batch without the probe fails at once.
func TestHangQueued(t *testing.T) {
	t.Parallel()
	rc := hangingClient(t)
	const timeout = 300 * time.Millisecond
	e := newEngine(t, rc, WithTimeout(timeout), WithFailMode(rules.FailLocal))
	r := req(user("u", win(10, time.Minute)))

	// defaultInflight calls lead the batches in flight; the next queues.
	var wg sync.WaitGroup
	for range defaultInflight {
		wg.Add(1)
		go func() { defer wg.Done(); e.Allow(context.Background(), r) }()
	}
	// Each leads its batch (a loaded machine may start them late).
	for deadline := time.Now().Add(5 * time.Second); !e.batch.full(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the leaders never were all in flight")
		}
	}
	start := time.Now()
	d, err := e.Allow(context.Background(), r)
	el := time.Since(start)
	wg.Wait()
	if !errors.Is(err, errNotAsked) || d.Source != "local" {
		t.Errorf("queued call: source %v err %v, want fromLocal and errNotAsked", d.Source, err)
	}
	// Without the fix the queued call waits for the leaders (about 250 ms)
	// and then for its own timeout (300 ms).
	if el >= timeout+timeout/2 {
		t.Errorf("queued call took %v with a %v timeout", el, timeout)
	}
}
