package slidelimit_test

// End-to-end tests of a rule group through the public API: the root
// package's Register, Handle and Middleware against miniredis and a real
// redis-server started by redistest, each under a random key prefix, with
// go-redis hooks counting every command the engine sends.

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
)

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })

// api is the tagged handler set of the end-to-end tests.
type api struct {
	Files  http.HandlerFunc `route:"GET /files/{id}" limit:"ip:2/min; exempt:superadmin; role(premium)=ip:4/min"`
	Admin  http.HandlerFunc `route:"GET /admin" limit:"user:2/min"`
	Closed http.HandlerFunc `route:"GET /closed" limit:"ip:100/min; fail:closed"`
	Open   http.HandlerFunc `route:"GET /open" limit:"ip:100/min; fail:open"`
	Shadow http.HandlerFunc `route:"GET /shadow" limit:"ip:1/min; mode:shadow"`
	Health http.HandlerFunc `route:"GET /healthz" limit:"none"`
}

func newAPI() *api { return &api{ok, ok, ok, ok, ok, ok} }

// redisBackend is a Redis the end-to-end tests run against: start returns its
// address and a function that kills it.
type redisBackend struct {
	name  string
	start func(t *testing.T) (addr string, kill func())
}

var redisBackends = []redisBackend{
	{"miniredis", func(t *testing.T) (string, func()) {
		mr := miniredis.RunT(t)
		return mr.Addr(), mr.Close
	}},
	{"redis", func(t *testing.T) (string, func()) {
		srv := redistest.Start(t)
		return srv.Addr, srv.Kill
	}},
}

// onBackends runs test in parallel subtests, one per backend.
func onBackends(t *testing.T, test func(t *testing.T, b redisBackend)) {
	t.Helper()
	for _, b := range redisBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b)
		})
	}
}

// fixture is a Redis, a command-counting client and a ServeMux with api
// registered.
type fixture struct {
	addr   string
	kill   func()
	cmds   *redistest.CommandCounter
	mux    *http.ServeMux
	events *testutil.Events
	lim    *slidelimit.Limiter
}

func newFixture(t *testing.T, b redisBackend, opts ...slidelimit.Option) *fixture {
	t.Helper()
	addr, kill := b.start(t)
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	f := &fixture{addr: addr, kill: kill, cmds: &redistest.CommandCounter{}, mux: http.NewServeMux(), events: &testutil.Events{}}
	client.AddHook(f.cmds)
	opts = append([]slidelimit.Option{
		slidelimit.WithMiddlewareOptions(
			middleware.WithPolicy(role.Policy{ByIP: []role.Role{"admin"}}),
			middleware.WithHook(f.events.Hook),
		),
		slidelimit.WithEngineOptions(engine.WithTimeout(time.Second), engine.WithKeyPrefix(redistest.Prefix(t))),
	}, opts...)
	lim, err := slidelimit.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	f.lim = lim
	if err := lim.Register(f.mux, newAPI()); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) do(method, target, remote string, id *role.Identity) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = remote
	if id != nil {
		r = r.WithContext(role.NewContext(r.Context(), *id))
	}
	w := httptest.NewRecorder()
	f.mux.ServeHTTP(w, r)
	return w
}

func ident(user string, roles ...role.Role) *role.Identity {
	return &role.Identity{User: user, Roles: roles}
}

func codes(ws ...*httptest.ResponseRecorder) []int {
	var c []int
	for _, w := range ws {
		c = append(c, w.Code)
	}
	return c
}

func TestEndToEndSharedPattern(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, b redisBackend) {
		f := newFixture(t, b)
		got := codes(
			f.do("GET", "/files/1", "192.0.2.1:1", nil),
			f.do("GET", "/files/2", "192.0.2.1:1", nil),
			f.do("GET", "/files/3", "192.0.2.1:1", nil),
			f.do("GET", "/files/3", "192.0.2.2:1", nil))
		if want := []int{200, 200, 429, 200}; !slices.Equal(got, want) {
			t.Errorf("codes = %v, want %v", got, want)
		}
		if s := f.events.Last().Scope; s != "GET /files/{id}" {
			t.Errorf("scope = %q, want the pattern", s)
		}
	})
}

func TestEndToEndExemptMakesNoRedisCalls(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, b redisBackend) {
		// The rule overrides' version check (a GET a second, off the request
		// path) would count too.
		f := newFixture(t, b, withRulesCheck(time.Hour))
		before := f.cmds.Count()
		for range 10 {
			if w := f.do("GET", "/files/1", "192.0.2.1:1", ident("root", "superadmin")); w.Code != 200 {
				t.Fatalf("exempt request: %d", w.Code)
			}
		}
		if d := f.cmds.Count() - before; d != 0 {
			t.Errorf("exempt requests sent %d Redis commands, want 0", d)
		}
		// The counter does see the engine's commands.
		f.do("GET", "/files/1", "192.0.2.1:1", ident("u"))
		if d := f.cmds.Count() - before; d == 0 {
			t.Error("a limited request sent no Redis command; the counter is not hooked in")
		}
		// Unlimited routes never reach Redis either.
		before = f.cmds.Count()
		f.do("GET", "/healthz", "192.0.2.1:1", nil)
		if d := f.cmds.Count() - before; d != 0 {
			t.Errorf("unlimited route sent %d Redis commands", d)
		}
	})
}

func TestEndToEndAdminByIP(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, b redisBackend) {
		f := newFixture(t, b)
		shared := codes(
			f.do("GET", "/admin", "192.0.2.1:1", ident("alice", "admin")),
			f.do("GET", "/admin", "192.0.2.1:2", ident("bob", "admin")),
			f.do("GET", "/admin", "192.0.2.1:3", ident("carol", "admin")))
		if want := []int{200, 200, 429}; !slices.Equal(shared, want) {
			t.Errorf("two admins from one IP: %v, want %v", shared, want)
		}
		apart := codes(
			f.do("GET", "/admin", "198.51.100.1:1", ident("alice", "admin")),
			f.do("GET", "/admin", "198.51.100.1:1", ident("alice", "admin")),
			f.do("GET", "/admin", "198.51.100.2:1", ident("alice", "admin")),
			f.do("GET", "/admin", "198.51.100.2:1", ident("alice", "admin")))
		if want := []int{200, 200, 200, 200}; !slices.Equal(apart, want) {
			t.Errorf("one admin from two IPs: %v, want %v", apart, want)
		}
		users := codes(
			f.do("GET", "/admin", "203.0.113.1:1", ident("dave")),
			f.do("GET", "/admin", "203.0.113.1:1", ident("erin")),
			f.do("GET", "/admin", "203.0.113.1:1", ident("erin")),
			f.do("GET", "/admin", "203.0.113.1:1", ident("erin")))
		if want := []int{200, 200, 200, 429}; !slices.Equal(users, want) {
			t.Errorf("plain users: %v, want %v", users, want)
		}
	})
}

func TestEndToEndRoleRules(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, b redisBackend) {
		f := newFixture(t, b)
		var got []int
		for range 5 {
			got = append(got, f.do("GET", "/files/1", "192.0.2.1:1", ident("p", "premium")).Code)
		}
		if want := []int{200, 200, 200, 200, 429}; !slices.Equal(got, want) {
			t.Errorf("premium: %v, want %v", got, want)
		}
	})
}

// TestEndToEndDenied checks the denied response against the engine's own
// decision: Retry-After is the ceiling of Decision.RetryAfter in seconds.
func TestEndToEndDenied(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, b redisBackend) {
		clk := redistest.NewClock()
		f := newFixture(t, b, slidelimit.WithMiddlewareOptions(middleware.WithLegacyHeaders()),
			slidelimit.WithEngineOptions(engine.WithClock(clk.Now)))
		f.do("GET", "/files/1", "192.0.2.1:1", nil)
		clk.Add(300 * time.Millisecond) // so the wait is not whole seconds
		f.do("GET", "/files/1", "192.0.2.1:1", nil)
		w := f.do("GET", "/files/1", "192.0.2.1:1", nil)
		if w.Code != 429 {
			t.Fatalf("status %d, want 429", w.Code)
		}
		ev := f.events.Last()
		// The second request filled the window, so the denial may come from
		// the cache of Redis's answers.
		if ev.Source != "redis" && ev.Source != "cache" || ev.Err != nil || ev.Decision.RetryAfter <= 0 {
			t.Fatalf("event = %+v", ev)
		}
		want := int64(math.Ceil(ev.Decision.RetryAfter.Seconds()))
		if got := w.Header().Get("Retry-After"); got != strconv.FormatInt(want, 10) {
			t.Errorf("Retry-After = %q, want ceil(%v) = %d", got, ev.Decision.RetryAfter, want)
		}
		h := w.Header()
		if got := h.Get("RateLimit-Policy"); got != `"ip-1min";q=2;w=60` {
			t.Errorf("RateLimit-Policy = %q", got)
		}
		if got := h.Get("RateLimit"); got != `"ip-1min";r=0;t=`+strconv.FormatInt(want, 10) {
			t.Errorf("RateLimit = %q", got)
		}
		if h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("legacy headers = %v", h)
		}
		var p struct {
			Type             string   `json:"type"`
			Status           int      `json:"status"`
			ViolatedPolicies []string `json:"violated-policies"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != 429 ||
			p.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || !slices.Equal(p.ViolatedPolicies, []string{"ip-1min"}) {
			t.Errorf("body %s: %+v %v", w.Body, p, err)
		}
	})
}

func TestEndToEndSpoofedForwardedFor(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, b redisBackend) {
		f := newFixture(t, b, slidelimit.WithMiddlewareOptions(middleware.WithTrustedProxies("10.0.0.0/8")))
		var got []int
		for i := range 3 {
			r := httptest.NewRequest("GET", "/files/1", nil)
			r.RemoteAddr = "192.0.2.1:1"
			r.Header.Set("X-Forwarded-For", "203.0.113."+strconv.Itoa(i))
			w := httptest.NewRecorder()
			f.mux.ServeHTTP(w, r)
			got = append(got, w.Code)
		}
		if want := []int{200, 200, 429}; !slices.Equal(got, want) {
			t.Errorf("spoofed X-Forwarded-For: %v, want %v", got, want)
		}
		// Through a trusted proxy the forwarded client is counted.
		var via []int
		for range 3 {
			r := httptest.NewRequest("GET", "/files/1", nil)
			r.RemoteAddr = "10.1.1.1:1"
			r.Header.Set("X-Forwarded-For", "203.0.113.50, 10.2.2.2")
			w := httptest.NewRecorder()
			f.mux.ServeHTTP(w, r)
			via = append(via, w.Code)
		}
		if want := []int{200, 200, 429}; !slices.Equal(via, want) {
			t.Errorf("via trusted proxies: %v, want %v", via, want)
		}
	})
}

func TestEndToEndShadow(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, b redisBackend) {
		f := newFixture(t, b)
		for i := range 3 {
			if w := f.do("GET", "/shadow", "192.0.2.1:1", nil); w.Code != 200 || w.Header().Get("RateLimit") != "" {
				t.Fatalf("shadow request %d: %d %v", i, w.Code, w.Header())
			}
		}
		if ev := f.events.Last(); !ev.Shadow || ev.Allowed || ev.Source != "redis" && ev.Source != "cache" {
			t.Errorf("event = %+v, want a reported would-be denial", ev)
		}
	})
}

// TestEndToEndRedisDown kills the Redis: fail:closed answers 503 with
// Retry-After, fail:open lets requests through, and the error never reaches
// the client.
func TestEndToEndRedisDown(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, b redisBackend) {
		f := newFixture(t, b)
		if w := f.do("GET", "/closed", "192.0.2.1:1", nil); w.Code != 200 {
			t.Fatalf("before kill: %d", w.Code)
		}
		f.kill()
		w := f.do("GET", "/closed", "192.0.2.1:1", nil)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Errorf("fail:closed: %d Retry-After %q, want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
		}
		if ev := f.events.Last(); ev.Source != "fail-closed" || !errors.Is(ev.Err, engine.ErrBackend) {
			t.Errorf("event = %+v", ev)
		}
		if body := w.Body.String(); strings.Contains(body, "engine") || strings.Contains(body, "refused") || strings.Contains(body, strings.Split(f.addr, ":")[1]) {
			t.Errorf("body leaks the backend error: %q", body)
		}
		if w := f.do("GET", "/open", "192.0.2.1:1", nil); w.Code != 200 {
			t.Errorf("fail:open: %d, want 200", w.Code)
		}
		if ev := f.events.Last(); ev.Source != "fail-open" || ev.Err == nil {
			t.Errorf("event = %+v", ev)
		}
	})
}

// TestEndToEndMiddleware uses Middleware as a chi or gorilla user would.
func TestEndToEndMiddleware(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, b redisBackend) {
		f := newFixture(t, b)
		mw, err := f.lim.Middleware("ip:1/min", middleware.WithScope("reports"))
		if err != nil {
			t.Fatal(err)
		}
		h := mw(ok)
		do := func(path string) int {
			r := httptest.NewRequest("GET", path, nil)
			r.RemoteAddr = "192.0.2.1:1"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w.Code
		}
		if got := []int{do("/reports/1"), do("/reports/2")}; !slices.Equal(got, []int{200, 429}) {
			t.Errorf("codes = %v, want [200 429]", got)
		}
		if _, err := f.lim.Middleware("ip:0/s"); err == nil {
			t.Error("Middleware accepted an invalid group")
		}
	})
}

// TestEndToEndServer runs the mux behind a real HTTP server, so RemoteAddr
// and Pattern come from net/http itself.
func TestEndToEndServer(t *testing.T) {
	t.Parallel()
	onBackends(t, func(t *testing.T, b redisBackend) {
		f := newFixture(t, b)
		srv := httptest.NewServer(f.mux)
		t.Cleanup(srv.Close)
		var got []int
		for range 3 {
			resp, err := srv.Client().Get(srv.URL + "/files/" + strconv.Itoa(len(got)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got = append(got, resp.StatusCode)
		}
		if want := []int{200, 200, 429}; !slices.Equal(got, want) {
			t.Errorf("codes = %v, want %v", got, want)
		}
		if s := f.events.Last().Decision.Windows; len(s) != 1 {
			t.Errorf("windows = %+v", s)
		}
	})
}
