package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
	w.Write([]byte("ok"))
})

func errorsAs[T error](err error, target *T) bool { return errors.As(err, target) }

// request builds a request from remote with an optional identity.
func request(method, target, remote string, id *role.Identity) *http.Request {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = remote
	if id != nil {
		r = r.WithContext(role.NewContext(r.Context(), *id))
	}
	return r
}

func user(name string, roles ...role.Role) *role.Identity {
	return &role.Identity{User: name, Roles: roles}
}

// routed registers the handler wrapped in a middleware for g on a fresh
// ServeMux under pattern and returns the mux.
func routed(t *testing.T, pattern string, g string, d middleware.Decider, opts ...middleware.Option) *http.ServeMux {
	t.Helper()
	mw, err := middleware.New(rules.MustParse(g), d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(pattern, mw(okHandler))
	return mux
}

func do(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// statuses sends the requests in order and returns their status codes.
func statuses(h http.Handler, rs ...*http.Request) []int {
	var out []int
	for _, r := range rs {
		out = append(out, do(h, r).Code)
	}
	return out
}

// newLogger returns a logger at debug level and what it writes.
func newLogger() (*slog.Logger, *testutil.LogBuffer) { return testutil.NewLogger(slog.LevelDebug) }

const (
	ok   = http.StatusOK
	deny = http.StatusTooManyRequests
)

func TestSubjects(t *testing.T) {
	t.Parallel()
	tenant := middleware.WithKeyFunc("tenant", func(r *http.Request) string { return r.URL.Query().Get("tenant") })
	tests := []struct {
		name  string
		group string
		req   *http.Request
		want  []string
	}{
		{"user with identity", "user:5/s", request("GET", "/x/1", "192.0.2.1:1", user("alice")), []string{"user=user:alice"}},
		{"user without identity counted by ip", "user:5/s", request("GET", "/x/1", "192.0.2.1:1", nil), []string{"user=ip:192.0.2.1"}},
		{"identity without user id counted by ip", "user:5/s", request("GET", "/x/1", "192.0.2.1:1", user("")), []string{"user=ip:192.0.2.1"}},
		{"user id spelling an ip stays a user", "user:5/s", request("GET", "/x/1", "192.0.2.1:1", user("ip:192.0.2.1")), []string{"user=user:ip:192.0.2.1"}},
		{"global", "global:5/s", request("GET", "/x/1", "192.0.2.1:1", nil), []string{"global=global"}},
		{"param", "param(id):5/s", request("GET", "/x/42", "192.0.2.1:1", nil), []string{"param(id)=param:42"}},
		{"key", "key(tenant):5/s", request("GET", "/x/1?tenant=acme", "192.0.2.1:1", nil), []string{"key(tenant)=key:acme"}},
		{"empty key counted by ip", "key(tenant):5/s", request("GET", "/x/1", "192.0.2.1:1", nil), []string{"key(tenant)=ip:192.0.2.1"}},
		{"missing header counted by ip", "header(X-Api-Key):5/s", request("GET", "/x/1", "192.0.2.1:1", nil), []string{"header(X-Api-Key)=ip:192.0.2.1"}},
		{"several limiters, one decision", "ip:5/s; user:10/min; global:100/s", request("GET", "/x/1", "192.0.2.1:1", user("bob")),
			[]string{"ip=ip:192.0.2.1", "user=user:bob", "global=global"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mem := newMem()
			mux := routed(t, "GET /x/{id}", tt.group, mem, tenant)
			if got := do(mux, tt.req).Code; got != ok {
				t.Fatalf("status %d", got)
			}
			if got := mem.subjects(); !slices.Equal(got, tt.want) {
				t.Errorf("subjects = %q, want %q", got, tt.want)
			}
			if reqs := mem.requests(); len(reqs) != 1 || reqs[0].Scope != "GET /x/{id}" {
				t.Errorf("requests = %+v, want one with scope %q", reqs, "GET /x/{id}")
			}
		})
	}

	t.Run("header value", func(t *testing.T) {
		t.Parallel()
		mem := newMem()
		mux := routed(t, "GET /x/{id}", "header(x-api-key):5/s", mem)
		r := request("GET", "/x/1", "192.0.2.1:1", nil)
		r.Header.Set("X-Api-Key", "k1")
		do(mux, r)
		if got := mem.subjects(); !slices.Equal(got, []string{"header(X-Api-Key)=header:k1"}) {
			t.Errorf("subjects = %q", got)
		}
	})
}

// TestUserAndIPNeverCollide checks that an anonymous client and a user whose
// id spells the client's address are counted apart.
func TestUserAndIPNeverCollide(t *testing.T) {
	t.Parallel()
	mux := routed(t, "GET /", "user:1/min", newMem())
	got := statuses(mux,
		request("GET", "/", "192.0.2.1:1", nil),
		request("GET", "/", "192.0.2.1:1", user("192.0.2.1")),
		request("GET", "/", "192.0.2.1:1", user("ip:192.0.2.1")),
		request("GET", "/", "192.0.2.1:1", nil))
	if want := []int{ok, ok, ok, deny}; !slices.Equal(got, want) {
		t.Errorf("statuses = %v, want %v", got, want)
	}
}

func TestExemptMakesNoCalls(t *testing.T) {
	t.Parallel()
	d := &funcDecider{allow: func(engine.Request) (engine.Decision, error) {
		return engine.Decision{}, nil // would deny anyone it is asked about
	}}
	var rec testutil.Events
	mux := routed(t, "GET /", "ip:1/min; exempt:superadmin; role(ops)=ip:5/min", d, middleware.WithHook(rec.Hook))
	for range 5 {
		w := do(mux, request("GET", "/", "192.0.2.1:1", user("root", "ops", "superadmin")))
		if w.Code != ok {
			t.Fatalf("exempt request: status %d", w.Code)
		}
		for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
			if v := w.Header().Get(h); v != "" {
				t.Errorf("exempt response has %s: %q", h, v)
			}
		}
	}
	if n := d.calls(); n != 0 {
		t.Errorf("decider called %d times for exempt requests, want 0", n)
	}
	if ev := rec.All(); len(ev) != 5 || !ev[0].Exempt || !ev[0].Allowed {
		t.Errorf("events = %+v, want 5 exempt", ev)
	}
	if got := do(mux, request("GET", "/", "192.0.2.1:1", user("someone"))).Code; got != deny || d.calls() != 1 {
		t.Errorf("non-exempt: status %d, calls %d; want 429 and 1", got, d.calls())
	}
}

func TestPatternScopeSharesWindows(t *testing.T) {
	t.Parallel()
	mem := newMem()
	mux := routed(t, "GET /files/{id}", "ip:2/min", mem)
	got := statuses(mux,
		request("GET", "/files/1", "192.0.2.1:1", nil),
		request("GET", "/files/2", "192.0.2.1:1", nil),
		request("GET", "/files/3", "192.0.2.1:1", nil))
	if want := []int{ok, ok, deny}; !slices.Equal(got, want) {
		t.Errorf("statuses = %v, want %v", got, want)
	}
	for _, r := range mem.requests() {
		if r.Scope != "GET /files/{id}" {
			t.Errorf("scope = %q, want the pattern", r.Scope)
		}
	}
}

func TestScopePrecedence(t *testing.T) {
	t.Parallel()
	fn := middleware.WithScopeFunc(func(*http.Request) string { return "from-func" })
	empty := middleware.WithScopeFunc(func(*http.Request) string { return "" })
	tests := []struct {
		name  string
		group string
		opts  []middleware.Option
		want  string
	}{
		{"pattern", "ip:5/s", nil, "GET /a/{id}"},
		{"group scope beats everything", "ip:5/s; scope:downloads", []middleware.Option{middleware.WithScope("opt"), fn}, "downloads"},
		{"WithScope beats func and pattern", "ip:5/s", []middleware.Option{middleware.WithScope("opt"), fn}, "opt"},
		{"func beats pattern", "ip:5/s", []middleware.Option{fn}, "from-func"},
		{"empty func result falls back to pattern", "ip:5/s", []middleware.Option{empty}, "GET /a/{id}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mem := newMem()
			do(routed(t, "GET /a/{id}", tt.group, mem, tt.opts...), request("GET", "/a/1", "192.0.2.1:1", nil))
			if r := mem.requests(); len(r) != 1 || r[0].Scope != tt.want {
				t.Errorf("requests = %+v, want scope %q", r, tt.want)
			}
		})
	}
}

// TestSharedScope checks that two routes naming the same scope share windows.
func TestSharedScope(t *testing.T) {
	t.Parallel()
	mem := newMem()
	mw, err := middleware.New(rules.MustParse("ip:2/min; scope:downloads"), mem)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /a", mw(okHandler))
	mux.Handle("GET /b", mw(okHandler))
	got := statuses(mux,
		request("GET", "/a", "192.0.2.1:1", nil),
		request("GET", "/b", "192.0.2.1:1", nil),
		request("GET", "/a", "192.0.2.1:1", nil))
	if want := []int{ok, ok, deny}; !slices.Equal(got, want) {
		t.Errorf("statuses = %v, want %v", got, want)
	}
}

func TestNoScope(t *testing.T) {
	t.Parallel()
	d := &funcDecider{allow: func(engine.Request) (engine.Decision, error) { return engine.Decision{Allowed: true}, nil }}
	logger, logs := newLogger()
	var rec testutil.Events
	mw, err := middleware.New(rules.MustParse("ip:5/s"), d, middleware.WithLogger(logger), middleware.WithHook(rec.Hook))
	if err != nil {
		t.Fatal(err)
	}
	// Wrapping the whole mux: r.Pattern is not set yet.
	mux := http.NewServeMux()
	mux.Handle("GET /a/{id}", okHandler)
	w := do(mw(mux), request("GET", "/a/1", "192.0.2.1:1", nil))
	if w.Code != http.StatusInternalServerError || d.calls() != 0 {
		t.Errorf("status %d, calls %d; want 500 and 0", w.Code, d.calls())
	}
	if ev := rec.All(); len(ev) != 1 || !errors.Is(ev[0].Err, lifecycle.ErrNoScope) {
		t.Errorf("events = %+v, want ErrNoScope", ev)
	}
	if !strings.Contains(logs.String(), "no scope") || strings.Contains(w.Body.String(), "scope") {
		t.Errorf("log %q / body %q: want cause logged, not written", logs.String(), w.Body.String())
	}
}

// TestAdminByIP checks the shared-admin policy: admins are counted by the
// client IP, so two admins behind one IP share a window and one admin from
// two IPs does not.
func TestAdminByIP(t *testing.T) {
	t.Parallel()
	policy := middleware.WithPolicy(role.Policy{ByIP: []role.Role{"admin"}})
	t.Run("two admins from one IP share", func(t *testing.T) {
		t.Parallel()
		mux := routed(t, "GET /", "user:2/min", newMem(), policy)
		got := statuses(mux,
			request("GET", "/", "192.0.2.1:1", user("alice", "admin")),
			request("GET", "/", "192.0.2.1:2", user("bob", "admin")),
			request("GET", "/", "192.0.2.1:3", user("alice", "admin")))
		if want := []int{ok, ok, deny}; !slices.Equal(got, want) {
			t.Errorf("statuses = %v, want %v", got, want)
		}
	})
	t.Run("one admin from two IPs does not", func(t *testing.T) {
		t.Parallel()
		mux := routed(t, "GET /", "user:2/min", newMem(), policy)
		got := statuses(mux,
			request("GET", "/", "192.0.2.1:1", user("alice", "admin")),
			request("GET", "/", "192.0.2.1:1", user("alice", "admin")),
			request("GET", "/", "198.51.100.1:1", user("alice", "admin")),
			request("GET", "/", "198.51.100.1:1", user("alice", "admin")),
			request("GET", "/", "198.51.100.1:1", user("alice", "admin")))
		if want := []int{ok, ok, ok, ok, deny}; !slices.Equal(got, want) {
			t.Errorf("statuses = %v, want %v", got, want)
		}
	})
	t.Run("plain users still by user id", func(t *testing.T) {
		t.Parallel()
		mux := routed(t, "GET /", "user:1/min", newMem(), policy)
		got := statuses(mux,
			request("GET", "/", "192.0.2.1:1", user("carol")),
			request("GET", "/", "192.0.2.1:1", user("dave")))
		if want := []int{ok, ok}; !slices.Equal(got, want) {
			t.Errorf("statuses = %v, want %v", got, want)
		}
	})
}

func TestRoleRules(t *testing.T) {
	t.Parallel()
	mem := newMem()
	mux := routed(t, "GET /", "ip:1/min; role(premium)=ip:3/min & user:10/min", mem)
	got := statuses(mux,
		request("GET", "/", "192.0.2.1:1", user("p", "premium")),
		request("GET", "/", "192.0.2.1:1", user("p", "premium")),
		request("GET", "/", "192.0.2.1:1", user("p", "premium")),
		request("GET", "/", "192.0.2.1:1", user("p", "premium")),
		request("GET", "/", "192.0.2.2:1", user("q")),
		request("GET", "/", "192.0.2.2:1", user("q")))
	if want := []int{ok, ok, ok, deny, ok, deny}; !slices.Equal(got, want) {
		t.Errorf("statuses = %v, want %v", got, want)
	}
	// The role rules' policies are advertised to the role's requests.
	w := do(mux, request("GET", "/", "192.0.2.9:1", user("p2", "premium")))
	if got := w.Header().Get("RateLimit-Policy"); got != `"ip-1min";q=3;w=60, "user-1min";q=10;w=60` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
}

func TestUnknownKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, group string
		want        []string
	}{
		{"default limiters", "key(tenant):5/s", []string{"tenant"}},
		{"role rules", "ip:5/s; role(a)=key(org):5/s", []string{"org"}},
		{"both", "key(tenant):5/s; role(a)=key(org):5/s", []string{"tenant", "org"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := &funcDecider{}
			mw, err := middleware.New(rules.MustParse(tt.group), d,
				middleware.WithKeyFunc("other", func(*http.Request) string { return "" }))
			if mw != nil || testutil.ConfigError(err, "unregistered", "WithKeyFunc") == nil {
				t.Fatalf("New = %v, %v; want an unregistered key function", mw != nil, err)
			}
			for _, name := range tt.want {
				if !strings.Contains(err.Error(), "key("+name+")") {
					t.Errorf("error %q does not name key(%s)", err, name)
				}
			}
		})
	}
}

func TestNewReportsEveryError(t *testing.T) {
	t.Parallel()
	_, err := middleware.New(rules.MustParse("key(k):5/s"), nil,
		middleware.WithTrustedProxies("10.0.0.0/8", "bogus"),
		middleware.WithIPv6Prefix(129),
		middleware.WithProxyHeader("X-Real-IP"),
		middleware.WithKeyFunc("nil", nil))
	for _, want := range [][2]string{{"decider", ""}, {"unregistered", "WithKeyFunc"}, {"option", "WithProxyHeader"}} {
		if testutil.ConfigError(err, want[0], want[1]) == nil {
			t.Errorf("error %v holds no *ConfigError of kind %s, option %q", err, want[0], want[1])
		}
	}
	for _, want := range []string{`"bogus"`, "WithIPv6Prefix", "WithProxyHeader", "WithKeyFunc"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not mention %s", err, want)
		}
	}
}

// policyItem is one parsed RateLimit-Policy member.
type policyItem struct {
	name string
	q, w int64
}

// parsePolicy parses a RateLimit-Policy field strictly: an sf-list of
// strings whose parameters are those of the draft (q required; qu, w, pk
// optional) with their types.
func parsePolicy(t *testing.T, lines []string) []policyItem {
	t.Helper()
	items, err := parseSFList(lines...)
	if err != nil || len(items) == 0 {
		t.Fatalf("RateLimit-Policy %q: %v (items %d)", lines, err, len(items))
	}
	var out []policyItem
	for _, it := range items {
		name, ok := it.Value.(string)
		if !ok {
			t.Fatalf("RateLimit-Policy item %#v is not a String", it.Value)
		}
		pi := policyItem{name: name}
		for _, p := range it.Params {
			switch p.Key {
			case "q", "w":
				n, ok := p.Value.(int64)
				if !ok || n < 0 || p.Key == "w" && n == 0 {
					t.Fatalf("RateLimit-Policy %s: %s=%#v is not a valid Integer", name, p.Key, p.Value)
				}
				if p.Key == "q" {
					pi.q = n
				} else {
					pi.w = n
				}
			case "qu":
				// Draft-11, Section 3.1.2: a String from the RateLimit
				// Quota Units registry.
				switch p.Value {
				case "requests", "content-bytes", "concurrent-requests":
				default:
					t.Fatalf("RateLimit-Policy %s: qu=%#v is not a registered quota unit", name, p.Value)
				}
			case "pk":
				if _, ok := p.Value.([]byte); !ok {
					t.Fatalf("pk is not a Byte Sequence")
				}
			default:
				t.Fatalf("RateLimit-Policy %s: unknown parameter %q", name, p.Key)
			}
		}
		if _, ok := it.param("q"); !ok {
			t.Fatalf("RateLimit-Policy %s: no q", name)
		}
		out = append(out, pi)
	}
	return out
}

// serviceLimit is one parsed RateLimit member.
type serviceLimit struct {
	name string
	r, t int64
	hasT bool
}

func parseRateLimit(t *testing.T, lines []string) []serviceLimit {
	t.Helper()
	items, err := parseSFList(lines...)
	if err != nil || len(items) == 0 {
		t.Fatalf("RateLimit %q: %v (items %d)", lines, err, len(items))
	}
	var out []serviceLimit
	for _, it := range items {
		name, ok := it.Value.(string)
		if !ok {
			t.Fatalf("RateLimit item %#v is not a String", it.Value)
		}
		sl := serviceLimit{name: name}
		for _, p := range it.Params {
			switch p.Key {
			case "r", "t":
				n, ok := p.Value.(int64)
				if !ok || n < 0 {
					t.Fatalf("RateLimit %s: %s=%#v is not a non-negative Integer", name, p.Key, p.Value)
				}
				if p.Key == "r" {
					sl.r = n
				} else {
					sl.t, sl.hasT = n, true
				}
			case "pk":
				if _, ok := p.Value.([]byte); !ok {
					t.Fatalf("pk is not a Byte Sequence")
				}
			default:
				t.Fatalf("RateLimit %s: unknown parameter %q", name, p.Key)
			}
		}
		if _, ok := it.param("r"); !ok {
			t.Fatalf("RateLimit %s: no r", name)
		}
		// t is optional in the draft; this package always sends it, and an
		// effective window of 0 seconds would tell a client nothing.
		if !sl.hasT || sl.t < 1 {
			t.Fatalf("RateLimit %s: t=%d (present %v), want an effective window of at least 1", name, sl.t, sl.hasT)
		}
		out = append(out, sl)
	}
	return out
}

type problemBody struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

func TestDeniedResponse(t *testing.T) {
	t.Parallel()
	mem := newMem()
	var rec testutil.Events
	mux := routed(t, "GET /files/{id}", "ip:2/s,5/min; user:10/h", mem, middleware.WithHook(rec.Hook))
	alice := func() *http.Request { return request("GET", "/files/1", "192.0.2.1:1", user("alice")) }

	w := do(mux, alice())
	if w.Code != ok {
		t.Fatalf("first request: %d", w.Code)
	}
	wantPolicy := []policyItem{{"ip-1s", 2, 1}, {"ip-1min", 5, 60}, {"user-1h", 10, 3600}}
	if got := parsePolicy(t, w.Header().Values("RateLimit-Policy")); !slices.Equal(got, wantPolicy) {
		t.Errorf("RateLimit-Policy = %+v, want %+v", got, wantPolicy)
	}
	if got := parseRateLimit(t, w.Header().Values("RateLimit")); !slices.Equal(got, []serviceLimit{{"ip-1s", 1, 1, true}}) {
		t.Errorf("RateLimit = %+v, want ip-1s r=1 t=1", got)
	}

	mem.advance(300 * time.Millisecond)
	do(mux, alice())
	mem.advance(300 * time.Millisecond)
	w = do(mux, alice())
	if w.Code != deny {
		t.Fatalf("third request: status %d, want 429", w.Code)
	}
	h := w.Header()
	if got := parsePolicy(t, h.Values("RateLimit-Policy")); !slices.Equal(got, wantPolicy) {
		t.Errorf("denied RateLimit-Policy = %+v, want %+v", got, wantPolicy)
	}
	ev := rec.All()
	last := ev[len(ev)-1]
	// The oldest of the two requests leaves the 1s window 400ms from now.
	if last.RetryAfter != 400*time.Millisecond || last.Allowed || last.Status != deny {
		t.Fatalf("event = %+v, want RetryAfter 400ms, denied", last)
	}
	retry, err := strconv.ParseInt(h.Get("Retry-After"), 10, 64)
	if err != nil || retry != 1 {
		t.Errorf("Retry-After = %q, want 1 (ceil of 400ms)", h.Get("Retry-After"))
	}
	sl := parseRateLimit(t, h.Values("RateLimit"))
	if len(sl) != 1 || sl[0].name != "ip-1s" || sl[0].r != 0 || !sl[0].hasT || sl[0].t > retry {
		t.Errorf("RateLimit = %+v, want ip-1s r=0 t<=Retry-After", sl)
	}
	if ct := h.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var p problemBody
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if p.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || p.Title == "" || p.Status != 429 || p.Detail == "" ||
		!slices.Equal(p.ViolatedPolicies, []string{"ip-1s"}) {
		t.Errorf("problem = %+v", p)
	}
	if last.Policy != "ip-1s" || last.Rule != "ip" || last.Window != (rules.Window{Limit: 2, Period: time.Second}) || last.Scope != "GET /files/{id}" {
		t.Errorf("event deciding window = %q %q %v %q", last.Policy, last.Rule, last.Window, last.Scope)
	}
}

// TestRetryAfterRounding checks that Retry-After is the engine's wait rounded
// up to whole seconds and at least 1, and that t never exceeds it.
func TestRetryAfterRounding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		wait  time.Duration
		reset time.Duration
		want  string
	}{
		{0, 0, "1"},
		{time.Millisecond, time.Millisecond, "1"},
		{time.Second, time.Second, "1"},
		{time.Second + time.Nanosecond, time.Second, "2"},
		{1500 * time.Millisecond, time.Hour, "2"},
		{59*time.Second + time.Millisecond, 59 * time.Second, "60"},
		{3 * time.Hour, 3 * time.Hour, "10800"},
	}
	for _, tt := range tests {
		t.Run(tt.wait.String(), func(t *testing.T) {
			t.Parallel()
			d := &funcDecider{allow: func(req engine.Request) (engine.Decision, error) {
				ws := []engine.WindowState{{Window: req.Checks[0].Windows[0], Used: 5, Reset: tt.reset}}
				return engine.Decision{RetryAfter: tt.wait, Windows: ws, Denied: ws[0]}, nil
			}}
			w := do(routed(t, "GET /", "ip:5/h", d), request("GET", "/", "192.0.2.1:1", nil))
			if got := w.Header().Get("Retry-After"); got != tt.want {
				t.Errorf("Retry-After = %q, want %q", got, tt.want)
			}
			retry, _ := strconv.ParseInt(tt.want, 10, 64)
			if sl := parseRateLimit(t, w.Header().Values("RateLimit")); sl[0].t > retry {
				t.Errorf("t=%d later than Retry-After %d", sl[0].t, retry)
			}
		})
	}
}

// TestPolicyWindowRounding checks how periods that are not whole seconds are
// advertised: w is rounded up, and at least 1.
func TestPolicyWindowRounding(t *testing.T) {
	t.Parallel()
	tests := []struct{ group, want string }{
		{"ip:5/500ms", `"ip-500ms";q=5;w=1`},
		{"ip:10/1500ms", `"ip-1500ms";q=10;w=2`},
		{"ip:1/ms", `"ip-1ms";q=1;w=1`},
		{"global:7/30s,100/d", `"global-30s";q=7;w=30, "global-1d";q=100;w=86400`},
		{"header(x-api-key):3/90min", `"header(X-Api-Key)-90min";q=3;w=5400`},
	}
	for _, tt := range tests {
		t.Run(tt.group, func(t *testing.T) {
			t.Parallel()
			w := do(routed(t, "GET /", tt.group, newMem()), request("GET", "/", "192.0.2.1:1", nil))
			if got := w.Header().Get("RateLimit-Policy"); got != tt.want {
				t.Errorf("RateLimit-Policy = %q, want %q", got, tt.want)
			}
			parsePolicy(t, w.Header().Values("RateLimit-Policy"))
		})
	}
}

// TestMostConstrained checks that RateLimit names the window with the fewest
// remaining requests.
func TestMostConstrained(t *testing.T) {
	t.Parallel()
	mem := newMem()
	mux := routed(t, "GET /", "ip:10/s,3/min; user:100/h", mem)
	w := do(mux, request("GET", "/", "192.0.2.1:1", user("u")))
	if got := parseRateLimit(t, w.Header().Values("RateLimit")); !slices.Equal(got, []serviceLimit{{"ip-1min", 2, 60, true}}) {
		t.Errorf("RateLimit = %+v, want ip-1min r=2 t=60", got)
	}
}

func TestLegacyHeaders(t *testing.T) {
	t.Parallel()
	mem := newMem()
	mux := routed(t, "GET /", "ip:2/min", mem, middleware.WithLegacyHeaders())
	w := do(mux, request("GET", "/", "192.0.2.1:1", nil))
	want := map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "1", "X-RateLimit-Reset": "60"}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	mem.advance(10*time.Second + 500*time.Millisecond)
	do(mux, request("GET", "/", "192.0.2.1:1", nil))
	w = do(mux, request("GET", "/", "192.0.2.1:1", nil))
	want = map[string]string{"X-RateLimit-Limit": "2", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "50"}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("denied %s = %q, want %q", k, got, v)
		}
	}
	if w := do(routed(t, "GET /", "ip:2/min", newMem()), request("GET", "/", "192.0.2.1:1", nil)); w.Header().Get("X-RateLimit-Limit") != "" {
		t.Error("legacy headers sent without the option")
	}
}

func TestDeniedHandler(t *testing.T) {
	t.Parallel()
	var got middleware.Denial
	custom := middleware.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d middleware.Denial) {
		got = d
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(d.Status)
		w.Write([]byte("slow down"))
	})
	mux := routed(t, "GET /", "ip:1/min", newMem(), custom)
	do(mux, request("GET", "/", "192.0.2.1:1", nil))
	w := do(mux, request("GET", "/", "192.0.2.1:1", nil))
	if w.Code != deny || w.Body.String() != "slow down" || w.Header().Get("Retry-After") != "60" || w.Header().Get("RateLimit") == "" {
		t.Errorf("response %d %q %v", w.Code, w.Body, w.Header())
	}
	if got.Status != deny || got.Policy != "ip-1min" || got.Rule != "ip" || got.RetryAfter != time.Minute || got.Scope != "GET /" {
		t.Errorf("denial = %+v", got)
	}
}

func TestFailClosed(t *testing.T) {
	t.Parallel()
	mem := newMem()
	mem.fail = errBackend
	logger, logs := newLogger()
	var rec testutil.Events
	mux := routed(t, "GET /", "ip:5/s; fail:closed", mem, middleware.WithLogger(logger), middleware.WithHook(rec.Hook))
	w := do(mux, request("GET", "/", "192.0.2.1:1", nil))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("status %d, Retry-After %q; want 503 and 1", w.Code, w.Header().Get("Retry-After"))
	}
	if strings.Contains(w.Body.String(), "refused") {
		t.Errorf("backend error leaked to client: %q", w.Body)
	}
	var p problemBody
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != 503 || w.Header().Get("Content-Type") != "application/problem+json" ||
		p.Type != "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity" || p.Title != "Temporary Reduced Capacity" || p.ViolatedPolicies != nil {
		t.Errorf("body %q: %+v %v", w.Body, p, err)
	}
	if !strings.Contains(logs.String(), "connection refused") || !strings.Contains(logs.String(), "fail-closed") {
		t.Errorf("log = %q, want the backend error", logs)
	}
	if ev := rec.All(); len(ev) != 1 || !errors.Is(ev[0].Err, errBackend) || ev[0].Source != "fail-closed" || ev[0].Status != 503 {
		t.Errorf("events = %+v", ev)
	}
}

func TestFailOpen(t *testing.T) {
	t.Parallel()
	mem := newMem()
	mem.fail = errBackend
	logger, logs := newLogger()
	var rec testutil.Events
	mux := routed(t, "GET /", "ip:1/s; fail:open", mem, middleware.WithLogger(logger), middleware.WithHook(rec.Hook))
	for range 3 {
		if w := do(mux, request("GET", "/", "192.0.2.1:1", nil)); w.Code != ok || strings.Contains(w.Body.String(), "refused") {
			t.Fatalf("status %d body %q", w.Code, w.Body)
		}
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("log = %q", logs)
	}
	if ev := rec.All(); len(ev) != 3 || ev[0].Source != "fail-open" || ev[0].Err == nil || !ev[0].Allowed {
		t.Errorf("events = %+v", ev)
	}
}

// TestBackendErrorsLogQuietly checks that an outage does not log a line
// per request: one warning per 10 s, while the hooks see every error.
func TestBackendErrorsLogQuietly(t *testing.T) {
	t.Parallel()
	mem := newMem()
	mem.fail = errBackend
	buf := &testutil.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(buf, nil))
	var rec testutil.Events
	mux := routed(t, "GET /", "ip:1000/s", mem, middleware.WithLogger(logger), middleware.WithHook(rec.Hook))
	const n = 200
	for range n {
		do(mux, request("GET", "/", "192.0.2.1:1", nil))
	}
	if lines := strings.Count(buf.String(), "\n"); lines != 1 {
		t.Errorf("%d log lines for %d backend errors, want 1: %q", lines, n, buf)
	}
	if ev := rec.All(); len(ev) != n {
		t.Errorf("%d events, want %d", len(ev), n)
	}
}

// TestCanceledRequestLogsQuietly checks that a backend error caused by the
// client going away is not logged as a warning.
func TestCanceledRequestLogsQuietly(t *testing.T) {
	t.Parallel()
	d := &funcDecider{allow: func(engine.Request) (engine.Decision, error) {
		return engine.Decision{Allowed: true, Source: "fail-open"}, context.Canceled
	}}
	buf := &testutil.LogBuffer{}
	logger := slog.New(slog.NewTextHandler(buf, nil)) // Info and above
	mux := routed(t, "GET /", "ip:1/s", d, middleware.WithLogger(logger))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	do(mux, request("GET", "/", "192.0.2.1:1", nil).WithContext(ctx))
	if s := buf.String(); s != "" {
		t.Errorf("log = %q, want nothing above debug", s)
	}
}

func TestShadowMode(t *testing.T) {
	t.Parallel()
	for _, fail := range []string{"", "; fail:closed"} {
		t.Run("fail"+fail, func(t *testing.T) {
			t.Parallel()
			mem := newMem()
			if fail != "" {
				mem.fail = errBackend
			}
			logger, logs := newLogger()
			var rec testutil.Events
			mux := routed(t, "GET /", "ip:1/min; mode:shadow"+fail, mem, middleware.WithLogger(logger), middleware.WithHook(rec.Hook))
			for i := range 3 {
				w := do(mux, request("GET", "/", "192.0.2.1:1", nil))
				if w.Code != ok {
					t.Fatalf("request %d: status %d; shadow mode must never deny", i, w.Code)
				}
				for _, h := range []string{"RateLimit", "RateLimit-Policy", "Retry-After"} {
					if v := w.Header().Get(h); v != "" {
						t.Errorf("shadow response has %s: %q", h, v)
					}
				}
			}
			ev := rec.All()
			if len(ev) != 3 || !ev[2].Shadow || ev[2].Allowed || ev[2].Status != 0 {
				t.Fatalf("events = %+v, want a would-be denial", ev)
			}
			if fail == "" && (!ev[0].Allowed || !strings.Contains(logs.String(), "would deny")) {
				t.Errorf("log = %q, want would-be denial", logs)
			}
		})
	}
}

func TestHookEvents(t *testing.T) {
	t.Parallel()
	var a, b testutil.Events
	mux := routed(t, "GET /f/{id}", "ip:1/min; role(ops)=ip:5/min; exempt:root", newMem(),
		middleware.WithHook(a.Hook), middleware.WithHook(b.Hook))
	do(mux, request("GET", "/f/1", "192.0.2.1:1", nil))
	do(mux, request("GET", "/f/1", "192.0.2.1:1", nil))
	do(mux, request("GET", "/f/1", "192.0.2.1:1", user("o", "ops")))
	do(mux, request("GET", "/f/1", "192.0.2.1:1", user("r", "root")))
	ev := a.All()
	if len(ev) != 4 || len(b.All()) != 4 {
		t.Fatalf("events %d and %d, want 4 each", len(ev), len(b.All()))
	}
	type brief struct {
		Scope, Policy string
		Role          role.Role
		Allowed       bool
		Exempt        bool
		Status        int
		Source        string
	}
	var got []brief
	for _, e := range ev {
		if e.Request == nil {
			t.Error("event without request")
		}
		got = append(got, brief{e.Scope, e.Policy, e.Role, e.Allowed, e.Exempt, e.Status, e.Source})
	}
	want := []brief{
		{"GET /f/{id}", "ip-1min", "", true, false, 0, "redis"},
		{"GET /f/{id}", "ip-1min", "", false, false, deny, "redis"},
		{"GET /f/{id}", "ip-1min", "ops", true, false, 0, "redis"},
		{"", "", "", true, true, 0, ""}, // exempt: nothing decided
	}
	if !slices.Equal(got, want) {
		t.Errorf("events\n got %+v\nwant %+v", got, want)
	}
	if len(ev[1].Decision.Windows) != 1 || ev[1].RetryAfter != time.Minute {
		t.Errorf("denied event decision = %+v", ev[1].Decision)
	}
}

// TestConcurrent serves many requests at once, for the race detector, and
// checks that exactly the limit is admitted.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	mux := routed(t, "GET /", "ip:50/min; user:1000/min", newMem(), middleware.WithHook(func(middleware.Event) {}))
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := range 200 {
		wg.Go(func() {
			w := do(mux, request("GET", "/", "192.0.2.1:1", user(strconv.Itoa(i%7))))
			if w.Code == ok {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if admitted != 50 {
		t.Errorf("admitted %d, want 50", admitted)
	}
}

// TestEngineRejectsRequest checks that a request the engine cannot evaluate
// is a server error, not a 429, and that the cause is logged, not written.
func TestEngineRejectsRequest(t *testing.T) {
	t.Parallel()
	d := &funcDecider{allow: func(engine.Request) (engine.Decision, error) {
		return engine.Decision{}, fmt.Errorf("fake: bad scope: %w", engine.ErrInvalid)
	}}
	logger, logs := newLogger()
	var rec testutil.Events
	w := do(routed(t, "GET /", "ip:1/s", d, middleware.WithLogger(logger), middleware.WithHook(rec.Hook)),
		request("GET", "/", "192.0.2.1:1", nil))
	if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), "bad scope") {
		t.Errorf("response %d %q, want 500 without the cause", w.Code, w.Body)
	}
	if !strings.Contains(logs.String(), "bad scope") {
		t.Errorf("log = %q", logs)
	}
	if ev := rec.All(); len(ev) != 1 || ev[0].Status != 500 || !errors.Is(ev[0].Err, engine.ErrInvalid) {
		t.Errorf("events = %+v", ev)
	}
	// Shadow mode never denies, not even then.
	w = do(routed(t, "GET /", "ip:1/s; mode:shadow", d), request("GET", "/", "192.0.2.1:1", nil))
	if w.Code != ok {
		t.Errorf("shadow: %d", w.Code)
	}
}

// TestNestedMiddlewares checks that a router-wide middleware around a
// route's own both advertise their policies, as list members over several
// field lines, and that the inner denial carries both.
func TestNestedMiddlewares(t *testing.T) {
	t.Parallel()
	mem := newMem()
	outer, err := middleware.New(rules.MustParse("global:100/h; scope:service"), mem)
	if err != nil {
		t.Fatal(err)
	}
	mux := routed(t, "GET /", "ip:1/min", mem)
	h := outer(mux)
	do(h, request("GET", "/", "192.0.2.1:1", nil))
	w := do(h, request("GET", "/", "192.0.2.1:1", nil))
	if w.Code != deny {
		t.Fatalf("status %d", w.Code)
	}
	pol := parsePolicy(t, w.Header().Values("RateLimit-Policy"))
	if want := []policyItem{{"global-1h", 100, 3600}, {"ip-1min", 1, 60}}; !slices.Equal(pol, want) {
		t.Errorf("RateLimit-Policy = %+v, want %+v", pol, want)
	}
	rl := parseRateLimit(t, w.Header().Values("RateLimit"))
	if len(rl) != 2 || rl[0].name != "global-1h" || rl[1].name != "ip-1min" || rl[1].r != 0 {
		t.Errorf("RateLimit = %+v", rl)
	}
}

func TestNewValidatesGroup(t *testing.T) {
	t.Parallel()
	bad := []rules.Group{
		{},
		{Rules: []rules.Rule{{Kind: rules.IP, Windows: []rules.Window{{Limit: 0, Period: time.Second}}}}},
		{Rules: []rules.Rule{{Kind: rules.IP, Windows: []rules.Window{{Limit: 1, Period: 0}}}}},
		{Rules: []rules.Rule{{Kind: "cookie", Name: "x", Windows: []rules.Window{{Limit: 1, Period: time.Second}}}}},
	}
	for i, g := range bad {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			var re *rules.Error
			if _, err := middleware.New(g, newMem()); !errors.As(err, &re) || re.Syntax {
				t.Errorf("New(%+v) = %v, want an invalid-rule *rules.Error", g, err)
			}
		})
	}
}
