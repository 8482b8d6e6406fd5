package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// scriptCalls returns how many FCALL and EVALSHA or EVAL commands c's
// server has run (INFO commandstats).
func scriptCalls(t *testing.T, c *redis.Client) (fcall, eval int64) {
	t.Helper()
	st := redistest.CommandStats(t, c)
	return st["fcall"].Calls, st["evalsha"].Calls + st["eval"].Calls
}

// hasLibrary reports whether c's server holds the engine's library.
func hasLibrary(t *testing.T, c *redis.Client) bool {
	t.Helper()
	libs, err := c.FunctionList(context.Background(), redis.FunctionListQuery{LibraryNamePattern: fnName}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(libs) == 1
}

// TestFunctionFlush checks that decisions go as FCALL, and that after
// FUNCTION FLUSH (also while callers run) they stay exact, no caller sees
// the missing function, and the library is loaded again.
func TestFunctionFlush(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	e := newEngine(t, rc, WithKeyPrefix(prefix), WithCachedDenials(false))
	ctx := context.Background()
	r := req(user("u", win(5, time.Minute)), ip("1.2.3.4", win(100, time.Minute)))
	for range 3 {
		mustAllow(t, e, r, true)
	}
	fcall, eval := scriptCalls(t, rc)
	if fcall != 3 || eval != 0 || !hasLibrary(t, rc) {
		t.Fatalf("3 decisions: %d FCALL, %d EVAL or EVALSHA, library loaded %v; want 3, 0, true", fcall, eval, hasLibrary(t, rc))
	}

	if err := rc.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// The first call after the flush goes as EVALSHA (and EVAL), which
	// loads nothing twice: the fourth and fifth requests fit, the sixth
	// does not.
	mustAllow(t, e, r, true)
	if !hasLibrary(t, rc) {
		t.Fatal("the library was not loaded again after FUNCTION FLUSH")
	}
	mustAllow(t, e, r, true)
	d, err := e.Allow(ctx, r)
	if err != nil || d.Allowed || d.Source != "redis" || d.Windows[0].Used != 5 {
		t.Fatalf("sixth request: allowed %v source %v err %v windows %+v; want a denial from Redis at 5 used", d.Allowed, d.Source, err, d.Windows)
	}
	after, _ := scriptCalls(t, rc)
	if after-fcall < 2 {
		t.Errorf("%d FCALL after the library came back, want at least 2", after-fcall)
	}

	flushDuring(t, e, func() error { return rc.FunctionFlush(ctx).Err() }, time.Second)
}

// TestFunctionOutOfMemory checks that a server out of memory, which
// refuses a whole FCALL, still answers a peek (which writes nothing) as
// it answers EVALSHA.
func TestFunctionOutOfMemory(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	ctx := context.Background()
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)))
	r := req(user("u", win(10, time.Minute)))
	mustAllow(t, e, r, true)
	if err := rc.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.ConfigSet(ctx, "maxmemory", "0") })
	d, err := e.peek(ctx, r)
	if err != nil || d.Source != "redis" || !d.Allowed || d.Windows[0].Used != 1 {
		t.Fatalf("peek out of memory: allowed %v source %v err %v windows %+v", d.Allowed, d.Source, err, d.Windows)
	}
	if e.fn.on.Load() != fnOn {
		t.Errorf("function state %d after an OOM, want on (%d)", e.fn.on.Load(), fnOn)
	}
}

// TestFunctionRefused checks that a server that cannot load functions
// (miniredis; an ACL user without FUNCTION) gets EVALSHA, and never FCALL.
func TestFunctionRefused(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	_, admin := redistest.StartClient(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "acl", "setuser", "nofn", "on", ">pw", "~*", "&*", "+@all", "-function", "-fcall").Err(); err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		name string
		opts *redis.Options
	}{
		{"miniredis", &redis.Options{Addr: m.Addr()}},
		{"acl", &redis.Options{Addr: admin.Options().Addr, Username: "nofn", Password: "pw"}},
	} {
		t.Run(b.name, func(t *testing.T) {
			c := redis.NewClient(b.opts)
			t.Cleanup(func() { c.Close() })
			var sent commandNames
			c.AddHook(&sent)
			e := newEngine(t, c, WithKeyPrefix(redistest.Prefix(t)))
			r := req(user("u", win(2, time.Minute)))
			mustAllow(t, e, r, true)
			mustAllow(t, e, r, true)
			mustAllow(t, e, r, false)
			if e.fn.on.Load() != fnOff {
				t.Errorf("function state %d, want off (%d)", e.fn.on.Load(), fnOff)
			}
			if n := sent.count("fcall"); n != 0 {
				t.Errorf("%d FCALL sent to a server that cannot load functions", n)
			}
			if n := sent.count("function"); n != 1 {
				t.Errorf("%d FUNCTION LOAD sent, want 1", n)
			}
		})
	}
}

// TestFunctionBusyLoad checks that a first load refused for the moment
// (BUSY: another client's script runs past busy-reply-threshold) leaves
// the function on, so that the decisions after it go as FCALL.
func TestFunctionBusyLoad(t *testing.T) {
	t.Parallel()
	s, rc := redistest.StartClient(t)
	ctx := context.Background()
	if err := rc.ConfigSet(ctx, "busy-reply-threshold", "20").Err(); err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithTimeout(2*time.Second))
	r := req(user("u", win(10, time.Minute)))
	done := busy(t, s.Addr, 2*time.Second) // long enough for a loaded machine to ask within it
	redistest.Eventually(t, "BUSY past the threshold", func() bool {
		err := rc.Ping(ctx).Err()
		return err != nil && strings.HasPrefix(err.Error(), "BUSY")
	})
	if d, err := e.Allow(ctx, r); err == nil || d.Source == "redis" {
		t.Fatalf("Allow during a busy script: source %v err %v, want the fail mode", d.Source, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if e.fn.on.Load() != fnOn {
		t.Fatalf("function state %d after a BUSY load, want on (%d)", e.fn.on.Load(), fnOn)
	}
	before, _ := scriptCalls(t, rc)
	mustAllow(t, e, r, true)
	// The decision, and the undo of the one that failed: FCALL or, for
	// the first, EVALSHA then FCALL once the library is loaded again.
	if after, _ := scriptCalls(t, rc); after == before || !hasLibrary(t, rc) {
		t.Errorf("%d FCALL after the busy script, library loaded %v; want some, and true", after-before, hasLibrary(t, rc))
	}
}

// TestFunctionClusterMaster checks that on a cluster every master gets the
// library, and that a master that lost it (restarted empty, promoted, or
// FUNCTION FLUSH) gets it again while the decisions on its keys stay
// exact.
func TestFunctionClusterMaster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	prefix := redistest.Prefix(t)
	afterClusterTTLs(t, cl, prefix)
	cc := cl.Client(t)
	e := newEngine(t, cc, WithKeyPrefix(prefix), WithCachedDenials(false))
	ctx := context.Background()
	mustAllow(t, e, req(user("warm", win(5, time.Minute))), true)
	masters := cl.Masters(t)
	for _, m := range masters {
		if c := m.Client(); !hasLibrary(t, c) {
			t.Errorf("master %s lacks the library after the first decision", m.Addr)
		}
	}
	r := req(user("u", win(3, time.Minute)))
	mustAllow(t, e, r, true)
	lost := cl.MasterOf(t, e.keyOf("s", r.Checks[0])).Client()
	if err := lost.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	mustAllow(t, e, r, true)
	mustAllow(t, e, r, true)
	mustAllow(t, e, r, false)
	if !hasLibrary(t, lost) {
		t.Error("the master that lost the library did not get it again")
	}
	before, _ := scriptCalls(t, lost)
	mustAllow(t, e, r, false)
	if after, _ := scriptCalls(t, lost); after != before+1 {
		t.Errorf("%d FCALL on the master after the reload, want 1", after-before)
	}
}

// commandNames counts the commands a client sends, by name.
type commandNames struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *commandNames) add(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	for _, cmd := range cmds {
		c.n[cmd.Name()]++
	}
}

func (c *commandNames) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func (c *commandNames) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(cmds...)
		return next(ctx, cmds)
	}
}
