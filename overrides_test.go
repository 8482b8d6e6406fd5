package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/rules"
)

// process is one application process of the override tests: a Limiter
// with /search registered on its own ServeMux.
type process struct {
	lim  *slidelimit.Limiter
	mux  *http.ServeMux
	logs *testutil.LogBuffer
}

// randomPrefix is redistest.Prefix under the name the throttle's tests
// still use.
func randomPrefix(t *testing.T) string { return redistest.Prefix(t) }

// newProcess starts a process on client under prefix, with GET /search
// limited to ip:100/min by its code.
func newProcess(t *testing.T, client engine.Client, prefix string, opts ...slidelimit.Option) *process {
	t.Helper()
	logger, logs := testutil.NewLogger(-4)
	opts = append([]slidelimit.Option{
		slidelimit.WithEngineOptions(engine.WithKeyPrefix(prefix), engine.WithTimeout(time.Second), engine.WithLogger(logger)),
		slidelimit.WithKeyFunc("tenant", func(r *http.Request) string { return r.Header.Get("X-Tenant") }),
	}, opts...)
	lim, err := slidelimit.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	mux := http.NewServeMux()
	if err := lim.Handle(mux, "GET /search", ok, "ip:100/min"); err != nil {
		t.Fatal(err)
	}
	return &process{lim: lim, mux: mux, logs: logs}
}

func (p *process) get(ip string) int {
	r := httptest.NewRequest("GET", "/search", nil)
	r.RemoteAddr = ip + ":1"
	w := httptest.NewRecorder()
	p.mux.ServeHTTP(w, r)
	return w.Code
}

// gets sends n requests from ip and returns their statuses.
func (p *process) gets(ip string, n int) string {
	var s []string
	for range n {
		s = append(s, fmt.Sprint(p.get(ip)))
	}
	return strings.Join(s, " ")
}

// TestOverrides runs the override scenario on a real Redis and on a
// 3-master Redis Cluster: SetRules in one process tightens a scope in the
// other within a second, counting the requests recorded before; a process
// started later applies the override from its first request; bad text
// changes nothing; SetRules with no text restores the code's rules everywhere.
func TestOverrides(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		client := func() engine.Client {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return c
		}
		overrideScenario(t, client)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		overrideScenario(t, func() engine.Client { return cl.Client(t) })
	})
}

func overrideScenario(t *testing.T, client func() engine.Client) {
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, b := newProcess(t, client(), prefix), newProcess(t, client(), prefix)

	if got := b.gets("192.0.2.1", 3); got != "200 200 200" {
		t.Fatalf("b under the code's ip:100/min: %s", got)
	}
	start := time.Now()
	if err := a.lim.SetRules(ctx, "GET /search", "ip:2/min"); err != nil {
		t.Fatal(err)
	}
	// a applies it before SetRules returns; the 3 requests b counted
	// count under it.
	if got := a.gets("192.0.2.1", 1); got != "429" {
		t.Errorf("a right after SetRules: %s, want 429", got)
	}
	took := redistest.Eventually(t, "b applies the override", func() bool { return b.get("192.0.2.1") == http.StatusTooManyRequests })
	took += time.Since(start) - took // from SetRules's call
	t.Logf("SetRules propagated to the other process in %v", took)
	if took > 1500*time.Millisecond {
		t.Errorf("propagation took %v, want under 1s (1.5s with margin)", took)
	}
	if got := b.gets("192.0.2.2", 3); got != "200 200 429" {
		t.Errorf("b, a fresh client under ip:2/min: %s", got)
	}
	for _, p := range []*process{a, b} {
		if l := p.logs.String(); strings.Count(l, "rule override applied") != 1 || !strings.Contains(l, `rules=ip:2/min`) {
			t.Errorf("want the change logged once:\n%s", l)
		}
	}

	// A process started after the override applies it from its first
	// request.
	c := newProcess(t, client(), prefix)
	if got := c.gets("192.0.2.3", 3); got != "200 200 429" {
		t.Errorf("late process: %s, want the override from its first request", got)
	}

	// Bad text: an error with the position, nothing stored or changed.
	before, err := rulesOf(ctx, a.lim)
	if err != nil {
		t.Fatal(err)
	}
	want := overridesInForce{Version: before.Version, Overrides: []override{{Scope: "GET /search", Rules: "ip:2/min"}}}
	if fmt.Sprint(before) != fmt.Sprint(want) {
		t.Errorf("Rules = %+v, want %+v", before, want)
	}
	for _, tt := range []struct {
		text string
		is   error
		msg  string
	}{
		{"ip:0/min", errRuleInvalid, `rules: "ip:0/min": limit 0 is below 1 at offset 3`},
		{"ip:5/fortnight", errRuleSyntax, `unknown unit "fortnight" at offset 5`},
		{"ip:5/s; scope:other", nil, `the rules say scope:other`},
		{"key(nokey):5/s", unregistered("WithKeyFunc"), `key(nokey)`},
		{"key(tenant):$quota/min", unregistered("WithLimitFunc"), `$quota/min`},
	} {
		err := a.lim.SetRules(ctx, "GET /search", tt.text)
		var ce *slidelimit.ConfigError
		if tt.is != nil && !isError(err, tt.is) || !errors.As(err, &ce) || ce.Kind != "rule" || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("SetRules(%q) = %v, want a *ConfigError of kind rule wrapping %v with %q", tt.text, err, tt.is, tt.msg)
		}
	}
	if after, err := rulesOf(ctx, a.lim); err != nil || fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("bad text changed the overrides: %+v %v", after, err)
	}
	if got := a.gets("192.0.2.4", 3); got != "200 200 429" {
		t.Errorf("a after bad text: %s, want ip:2/min still", got)
	}

	// SetRules with no text restores the code's rules everywhere.
	if err := b.lim.SetRules(ctx, "GET /search", ""); err != nil {
		t.Fatal(err)
	}
	took = redistest.Eventually(t, "a restores the code's rules", func() bool { return a.get("192.0.2.1") == http.StatusOK })
	if took > 1500*time.Millisecond {
		t.Errorf("clearing propagated in %v", took)
	}
	if got := c.gets("192.0.2.5", 3); got != "200 200 200" {
		redistest.Eventually(t, "c restores the code's rules", func() bool { return c.get("192.0.2.6") == http.StatusOK })
	}
	if r, err := rulesOf(ctx, c.lim); err != nil || len(r.Overrides) != 0 || r.Version <= before.Version {
		t.Errorf("overrides after clearing = %+v, %v", r, err)
	}
}

// noSubscribe hides the Subscribe method of a client, so that the
// Limiter cannot hear of changes on the channel.
type noSubscribe struct{ engine.Client }

// TestOverridesLostMessage checks that the periodic version check applies
// a change whose pub/sub message never came: one written to Redis
// directly, without publishing, to a process that cannot subscribe.
func TestOverridesLostMessage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	prefix := redistest.Prefix(t)
	p := newProcess(t, noSubscribe{rdb}, prefix, withRulesCheck(200*time.Millisecond))
	ctx := context.Background()
	if err := rdb.HSet(ctx, prefix+"{rules}", "GET /search", "ip:1/min").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Incr(ctx, prefix+"{rules}version").Err(); err != nil {
		t.Fatal(err)
	}
	took := redistest.Eventually(t, "the check finds the change", func() bool {
		p.get("192.0.2.1")
		return p.get("192.0.2.1") == http.StatusTooManyRequests
	})
	t.Logf("applied by the version check in %v", took)
}

// TestOverridesRedisDown checks that a process that cannot reach Redis
// enforces the code's rules when it never saw an override, and keeps the
// overrides it knows when Redis goes away.
func TestOverridesRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { client.Close() })
	p := newProcess(t, client, prefix, withRulesCheck(50*time.Millisecond),
		slidelimit.WithEngineOptions(engine.WithFailMode(rules.FailLocal), engine.WithTimeout(100*time.Millisecond)))
	if err := p.lim.SetRules(context.Background(), "GET /search", "ip:2/min"); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	// Wait for a failed check (every 50 ms; later than that on a loaded
	// machine), then a few more.
	redistest.Eventually(t, "a failed version check", func() bool {
		return strings.Contains(p.logs.String(), "cannot read rule overrides")
	})
	time.Sleep(200 * time.Millisecond)
	// The fallback limiter decides with the override: 2 a minute.
	if got := p.gets("192.0.2.9", 3); got != "200 200 429" {
		t.Errorf("with redis down: %s, want the override kept", got)
	}
	if l := p.logs.String(); strings.Count(l, "cannot read rule overrides") != 1 {
		t.Errorf("want one log line for the outage:\n%s", l)
	}

	// A process that never reached Redis enforces its code's rules.
	dead := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { dead.Close() })
	q := newProcess(t, dead, prefix, slidelimit.WithEngineOptions(engine.WithFailMode(rules.FailLocal), engine.WithTimeout(100*time.Millisecond)))
	if got := q.gets("192.0.2.9", 3); got != "200 200 200" {
		t.Errorf("new process with redis down: %s, want the code's ip:100/min", got)
	}
}

// TestOverridesOff checks the rules check at 0 (overrides off): no overrides are read or
// written.
func TestOverridesOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := newProcess(t, srv.Client(), redistest.Prefix(t), withRulesCheck(0))
	if err := p.lim.SetRules(context.Background(), "GET /search", "ip:1/s"); !isKind(err, "option") {
		t.Errorf("SetRules = %v", err)
	}
	if got := p.gets("192.0.2.1", 2); got != "200 200" {
		t.Errorf("%s", got)
	}
}

// TestOverridesNamedScope checks an override of a scope: name shared by
// two routes, one registered with Handle and one built with Middleware:
// both follow it, in the scope's own windows, and Peek sees its windows.
func TestOverridesNamedScope(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := newProcess(t, srv.Client(), redistest.Prefix(t))
	if err := p.lim.Handle(p.mux, "GET /a", ok, "ip:100/min; scope:shared"); err != nil {
		t.Fatal(err)
	}
	mw, err := p.lim.Middleware("ip:100/min; scope:shared")
	if err != nil {
		t.Fatal(err)
	}
	b := mw(ok)
	get := func(h http.Handler, path string) int {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "192.0.2.1:1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	ctx := context.Background()
	if err := p.lim.SetRules(ctx, "shared", "ip:3/min; scope:shared"); err != nil {
		t.Fatal(err)
	}
	got := []int{get(p.mux, "/a"), get(b, "/b"), get(p.mux, "/a"), get(b, "/b")}
	if fmt.Sprint(got) != "[200 200 200 429]" {
		t.Errorf("two handlers of scope shared under ip:3/min: %v", got)
	}
	d, err := p.lim.Peek(ctx, "shared", "ip", "192.0.2.1", false)
	if err != nil {
		t.Fatal(err)
	}
	var windows []string
	for _, ws := range d.Windows {
		windows = append(windows, fmt.Sprintf("%v used %d", ws.Window, ws.Used))
	}
	if fmt.Sprint(windows) != "[3/min used 3 100/min used 3]" {
		t.Errorf("Peek windows: %v", windows)
	}
	// The search route, in another scope, is untouched.
	if got := p.gets("192.0.2.1", 1); got != "200" {
		t.Errorf("GET /search: %s", got)
	}
}

// TestOverridesStore checks that a process whose store was emptied
// (FLUSHALL, a restart without persistence) goes back to its code's rules
// at its version check, and that a closed Limiter follows no change.
func TestOverridesStore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	p := newProcess(t, rdb, prefix, withRulesCheck(100*time.Millisecond))
	closed := newProcess(t, rdb, prefix)
	if err := p.lim.SetRules(ctx, "GET /search", "ip:1/min"); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the other process applies the override", func() bool {
		return closed.get("192.0.2.8") == http.StatusTooManyRequests
	})
	closed.lim.Close()
	if err := p.lim.SetRules(ctx, "GET /search", "ip:5/min"); err != nil {
		t.Fatal(err)
	}
	// Flushed by hand: the next version check finds version 0 and no
	// overrides.
	if err := rdb.Del(ctx, prefix+"{rules}", prefix+"{rules}version").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the code's rules after the store was emptied", func() bool {
		return p.gets("192.0.2.7", 6) == "200 200 200 200 200 200"
	})
	if l := p.logs.String(); !strings.Contains(l, "rule override cleared") {
		t.Errorf("no log of the cleared override:\n%s", l)
	}
	// The closed process kept what it had (ip:1/min) and heard of nothing.
	time.Sleep(300 * time.Millisecond)
	if l := closed.logs.String(); strings.Count(l, "rule override") != 1 {
		t.Errorf("a closed Limiter applied a change:\n%s", l)
	}
}

// TestOverridesOutageLeavesPool checks that the version checks of a Limiter
// whose Redis is down do not go through the client's pool: go-redis's pool
// stops dialing after PoolSize failed dials in a row and then dials once
// a second only, which kept a Limiter behind a restarted Redis. Here many
// more checks than PoolSize fail, and the pool dials the restarted server
// at once.
func TestOverridesOutageLeavesPool(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1, PoolSize: 4})
	t.Cleanup(func() { rc.Close() })
	p := newProcess(t, rc, redistest.Prefix(t), withRulesCheck(10*time.Millisecond))
	s.Kill()
	time.Sleep(300 * time.Millisecond) // about 30 version checks
	s.Restart()
	if err := rc.Ping(context.Background()).Err(); err != nil {
		t.Errorf("the client's pool does not dial a restarted server: %v", err)
	}
	redistest.Eventually(t, "overrides readable again", func() bool { return strings.Contains(p.logs.String(), "rule overrides readable again") })
}
