package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/slidelimit/slidelimit/engine/internal/inprocess"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// TestEmbeddedSlowNotDown holds an embedded miniredis (in this process)
// for 300 ms, three times the default timeout, while a decision is in
// flight, as a loaded machine delays it: the decision must still come from
// the store, not from the fail mode, and the sixth login is denied (a
// sixth failed login once passed key(account):5/min through fail:local
// that way). The engine runs with
// the default timeout and a client whose context deadlines reach the
// socket, as the demo's does; the lock makes the delay certain, so the test
// fails without the fix whatever the load.
func TestEmbeddedSlowNotDown(t *testing.T) {
	t.Parallel()
	for _, ctxTimeouts := range []bool{true, false} {
		name := "context deadlines"
		if !ctxTimeouts {
			name = "read timeout"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := miniredis.RunT(t)
			// Without context deadlines go-redis's own ReadTimeout (3 s by
			// default) bounds the call, and the engine's timeout ends the
			// wait of its callers.
			rc := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: ctxTimeouts})
			t.Cleanup(func() { rc.Close() })
			e, err := New(rc, WithFailMode(rules.FailLocal)) // the default timeout, 100 ms
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			login := req(Check{Rule: rules.Rule{Kind: rules.Key, Name: "account",
				Windows: []rules.Window{win(5, time.Minute)}}, Subject: "bob"})
			ctx := context.Background()
			for i := range 6 {
				if i == 4 { // the fifth login, admitted: no cached denial answers it
					m.Lock()
					go func() {
						time.Sleep(300 * time.Millisecond)
						m.Unlock()
					}()
				}
				start := time.Now()
				d, err := e.Allow(ctx, login)
				// The sixth may be a cached denial: the store's state too.
				if err != nil || d.Source != "redis" && d.Source != "cache" {
					t.Fatalf("request %d (after %v): %+v, %v; want a decision from the store", i+1, time.Since(start), d, err)
				}
				if d.Allowed != (i < 5) {
					t.Fatalf("request %d: allowed %v", i+1, d.Allowed)
				}
			}
		})
	}
}

// TestEmbeddedClosed checks that a closed embedded store (it refuses
// connections) still goes to the fail mode at once.
func TestEmbeddedClosed(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	e := newEngine(t, rc, WithFailMode(rules.FailLocal))
	if e.timeout != inprocess.MinTimeout {
		t.Fatalf("timeout %v with an embedded store, want %v", e.timeout, inprocess.MinTimeout)
	}
	m.Close()
	start := time.Now()
	d, err := e.Allow(context.Background(), req(user("u", win(5, time.Minute))))
	if d.Source != "local" || !errors.Is(err, ErrBackend) {
		t.Fatalf("with the store closed: %+v, %v; want a local decision", d, err)
	}
	if took := time.Since(start); took >= inprocess.MinTimeout {
		t.Errorf("the decision took %v: a refused connection waited for the timeout", took)
	}
}

// TestEmbeddedOnlyInProcess checks what embedded recognizes: a miniredis
// of this process, not a real Redis, not a server of this process that
// does not answer (a test's stand-in for a hung Redis), not an address
// nothing listens on.
func TestEmbeddedOnlyInProcess(t *testing.T) {
	t.Parallel()
	_, mc := redistest.Mini(t)
	if !miniredisIn(mc, time.Second) {
		t.Error("a miniredis of this process is not recognized")
	}
	_, rc := redistest.StartClient(t)
	if miniredisIn(rc, time.Second) {
		t.Error("a real Redis is taken for an embedded store")
	}
	if miniredisIn(hangingClient(t), 50*time.Millisecond) {
		t.Error("a server that does not answer is taken for an embedded store")
	}
	if here, err := inprocess.ListensHere("1"); err == nil && here {
		t.Error("port 1 listens in this process")
	}
}

// goRedisLines captures go-redis's own (package-wide) logger until the
// test ends, then restores go-redis's default logger. Tests using it must
// not run in parallel with others that set the logger.
type goRedisLines struct {
	mu    sync.Mutex
	lines []string
}

func (g *goRedisLines) Printf(_ context.Context, format string, v ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lines = append(g.lines, fmt.Sprintf(format, v...))
}

func (g *goRedisLines) all() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.lines)
}

func captureGoRedis(t *testing.T) *goRedisLines {
	g := &goRedisLines{}
	redis.SetLogger(g)
	t.Cleanup(logging.Enable)
	return g
}

// TestEmbeddedProbeQuiet checks that recognizing an embedded store makes
// go-redis log nothing: the probe's client once shared the application
// client's push-notification processor, so go-redis's NewClient logged
// "failed to initialize maintnotifications ... cannot overwrite existing
// handler" at every New on a loopback address (the demo's first line).
func TestEmbeddedProbeQuiet(t *testing.T) {
	logs := captureGoRedis(t) // not parallel: go-redis's logger is global
	m := miniredis.RunT(t)
	mc := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { mc.Close() })
	if err := mc.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if !miniredisIn(mc, time.Second) {
		t.Fatal("a miniredis of this process is not recognized")
	}
	if err := mc.Ping(context.Background()).Err(); err != nil {
		t.Errorf("the application's client fails after the probe: %v", err)
	}
	// go-redis dials in goroutines of its own that outlive a closed
	// client: an earlier test's failed dial to another address may be
	// logged meanwhile (seen: 127.0.0.1:1, TestRegionsBlock's dead peers).
	var lines []string
	for _, l := range logs.all() {
		if !strings.Contains(l, "dial tcp ") || strings.Contains(l, m.Addr()) {
			lines = append(lines, l)
		}
	}
	if len(lines) > 0 {
		t.Errorf("go-redis logged %d lines during the probe:\n%s", len(lines), strings.Join(lines, "\n"))
	}
}

// miniredisIn is inprocess.Miniredis for any client: only a *redis.Client
// can be one.
func miniredisIn(c Client, wait time.Duration) bool {
	rc, ok := c.(*redis.Client)
	return ok && inprocess.Miniredis(rc, wait)
}
