package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// inspectAPI has a rule ID ("user", "ip") declared with different
// windows by the defaults and by role rules, which Peek must show as
// one union.
type inspectAPI struct {
	Files  http.HandlerFunc `route:"GET /files/{id}" limit:"user:3/min,10/h; ip:5/min,50/h; exempt:superadmin; role(admin)=ip:4/min,40/h; role(trial)=user:2/min"`
	Keys   http.HandlerFunc `route:"GET /keys" limit:"header(X-Api-Key):2/min,20/h; global:100/h"`
	Health http.HandlerFunc `route:"GET /health" limit:"none"`
}

const filesScope = "GET /files/{id}"

// inspectBackends runs test against miniredis and a real redis-server.
func inspectBackends(t *testing.T, test func(t *testing.T, client *redis.Client)) {
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		_, client := redistest.Mini(t)
		test(t, client)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { client.Close() })
		test(t, client)
	})
}

// inspectFixture is a Limiter with inspectAPI registered on a ServeMux.
type inspectFixture struct {
	lim *slidelimit.Limiter
	mux *http.ServeMux
}

func newInspectFixture(t *testing.T, client *redis.Client, opts ...slidelimit.Option) *inspectFixture {
	t.Helper()
	opts = append([]slidelimit.Option{slidelimit.WithEngineOptions(engine.WithTimeout(time.Second), engine.WithFailMode(rules.FailClosed))}, opts...)
	lim, err := slidelimit.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	mux := http.NewServeMux()
	if err := lim.Register(mux, &inspectAPI{ok, ok, ok}); err != nil {
		t.Fatal(err)
	}
	return &inspectFixture{lim: lim, mux: mux}
}

func (f *inspectFixture) get(t *testing.T, target, remote string, id *role.Identity) int {
	t.Helper()
	r := httptest.NewRequest("GET", target, nil)
	r.RemoteAddr = remote
	if id != nil {
		r = r.WithContext(role.NewContext(r.Context(), *id))
	}
	w := httptest.NewRecorder()
	f.mux.ServeHTTP(w, r)
	return w.Code
}

// summary prints the windows of a decision as "limit/period used remaining".
func summary(d engine.Decision) []string {
	var s []string
	for _, w := range d.Windows {
		s = append(s, fmt.Sprintf("%d:%s used=%d rem=%d", w.Check, w.Window, w.Used, w.Remaining))
	}
	return s
}

func peek(t *testing.T, lim *slidelimit.Limiter, byIP bool, scope, id, subject string) []string {
	t.Helper()
	d, err := lim.Peek(context.Background(), scope, id, subject, byIP)
	if err != nil {
		t.Fatalf("Peek(%q, %q, %q, byIP %v): %v", scope, id, subject, byIP, err)
	}
	if d.Source != "redis" {
		t.Fatalf("Peek source = %v, want Redis", d.Source)
	}
	return summary(d)
}

func wantWindows(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: windows\n got %q\nwant %q", what, got, want)
	}
}

func TestPeekAndReset(t *testing.T) {
	t.Parallel()
	inspectBackends(t, func(t *testing.T, client *redis.Client) {
		f := newInspectFixture(t, client)
		ctx := context.Background()
		alice := ident("alice", "user")

		wantWindows(t, "nothing counted yet", peek(t, f.lim, false, filesScope, "user", "alice"),
			"0:2/min used=0 rem=2", "0:3/min used=0 rem=3", "0:10/h used=0 rem=10")
		for i := range 2 {
			if c := f.get(t, fmt.Sprintf("/files/%d", i), "192.0.2.1:1", alice); c != 200 {
				t.Fatalf("request %d: %d", i, c)
			}
		}
		// The union: the trial role's 2/min is full although alice, not
		// a trial user, still has a request left in her own 3/min.
		first := peek(t, f.lim, false, filesScope, "user", "alice")
		wantWindows(t, "after two", first, "0:2/min used=2 rem=0", "0:3/min used=2 rem=1", "0:10/h used=2 rem=8")
		wantWindows(t, "peek does not count", peek(t, f.lim, false, filesScope, "user", "alice"), first...)
		if c := f.get(t, "/files/9", "192.0.2.1:1", alice); c != 200 {
			t.Fatalf("third request: %d", c)
		}
		if c := f.get(t, "/files/9", "192.0.2.1:1", alice); c != 429 {
			t.Fatalf("fourth request: %d, want 429", c)
		}
		wantWindows(t, "the ip limiter, with the admin role's window",
			peek(t, f.lim, false, filesScope, "ip", "192.0.2.1"), "0:4/min used=3 rem=1", "0:5/min used=3 rem=2", "0:40/h used=3 rem=37", "0:50/h used=3 rem=47")
		wantWindows(t, "an IPv4-mapped address is the IPv4 one",
			peek(t, f.lim, false, filesScope, "ip", "::ffff:192.0.2.1"), "0:4/min used=3 rem=1", "0:5/min used=3 rem=2", "0:40/h used=3 rem=37", "0:50/h used=3 rem=47")

		if err := f.lim.Reset(ctx, filesScope, "user", "alice", false); err != nil {
			t.Fatal(err)
		}
		wantWindows(t, "after reset", peek(t, f.lim, false, filesScope, "user", "alice"),
			"0:2/min used=0 rem=2", "0:3/min used=0 rem=3", "0:10/h used=0 rem=10")
		if c := f.get(t, "/files/9", "192.0.2.2:1", alice); c != 200 {
			t.Fatalf("after reset: %d, want 200", c)
		}
		wantWindows(t, "the ip limiter is not reset", peek(t, f.lim, false, filesScope, "ip", "192.0.2.1"),
			"0:4/min used=3 rem=1", "0:5/min used=3 rem=2", "0:40/h used=3 rem=37", "0:50/h used=3 rem=47")
	})
}

func TestPeekByIP(t *testing.T) {
	t.Parallel()
	inspectBackends(t, func(t *testing.T, client *redis.Client) {
		f := newInspectFixture(t, client, slidelimit.WithMiddlewareOptions(middleware.WithPolicy(role.Policy{ByIP: []role.Role{"shared"}})))
		ctx := context.Background()
		// An anonymous caller and a role counted by IP land in the user
		// rule's IP form; a user whose id spells the address does not.
		f.get(t, "/files/1", "192.0.2.9:1", nil)
		f.get(t, "/files/1", "192.0.2.9:2", ident("ops", "shared"))
		f.get(t, "/files/1", "192.0.2.9:3", ident("192.0.2.9", "user"))

		wantWindows(t, "user limiter by IP", peek(t, f.lim, true, filesScope, "user", "192.0.2.9"),
			"0:2/min used=2 rem=0", "0:3/min used=2 rem=1", "0:10/h used=2 rem=8")
		wantWindows(t, "user id spelling the IP", peek(t, f.lim, false, filesScope, "user", "192.0.2.9"),
			"0:2/min used=1 rem=1", "0:3/min used=1 rem=2", "0:10/h used=1 rem=9")
		wantWindows(t, "Peek byIP of an ip limiter is Peek", peek(t, f.lim, true, filesScope, "ip", "192.0.2.9"),
			peek(t, f.lim, false, filesScope, "ip", "192.0.2.9")...)

		// A request without the header is counted by IP too.
		f.get(t, "/keys", "192.0.2.9:1", nil)
		wantWindows(t, "header limiter by IP", peek(t, f.lim, true, "GET /keys", "header(x-api-key)", "192.0.2.9"),
			"0:2/min used=1 rem=1", "0:20/h used=1 rem=19")
		wantWindows(t, "global", peek(t, f.lim, false, "GET /keys", "global", ""), "0:100/h used=1 rem=99")

		if err := f.lim.Reset(ctx, filesScope, "user", "192.0.2.9", true); err != nil {
			t.Fatal(err)
		}
		wantWindows(t, "after Reset byIP", peek(t, f.lim, true, filesScope, "user", "192.0.2.9"),
			"0:2/min used=0 rem=2", "0:3/min used=0 rem=3", "0:10/h used=0 rem=10")
		wantWindows(t, "the user id spelling the IP is kept", peek(t, f.lim, false, filesScope, "user", "192.0.2.9"),
			"0:2/min used=1 rem=1", "0:3/min used=1 rem=2", "0:10/h used=1 rem=9")
	})
}

func TestPeekIPv6Grouping(t *testing.T) {
	t.Parallel()
	inspectBackends(t, func(t *testing.T, client *redis.Client) {
		f := newInspectFixture(t, client, slidelimit.WithMiddlewareOptions(middleware.WithIPv6Prefix(48)))
		f.get(t, "/files/1", "[2001:db8:1:ff::1]:1", nil)
		f.get(t, "/files/1", "[2001:db8:1:aa::2]:1", nil)
		for _, subject := range []string{"2001:db8:1::5", "2001:db8:1::/48"} {
			wantWindows(t, subject, peek(t, f.lim, false, filesScope, "ip", subject), "0:4/min used=2 rem=2", "0:5/min used=2 rem=3", "0:40/h used=2 rem=38", "0:50/h used=2 rem=48")
		}
		wantWindows(t, "another /48", peek(t, f.lim, false, filesScope, "ip", "2001:db8:2::1"), "0:4/min used=0 rem=4", "0:5/min used=0 rem=5", "0:40/h used=0 rem=40", "0:50/h used=0 rem=50")
		if _, err := f.lim.Peek(context.Background(), filesScope, "ip", "2001:db8:1::/64", false); !errors.Is(err, lifecycle.ErrSubject) {
			t.Errorf("Peek of a /64 network when clients are grouped by /48: %v, want ErrSubject", err)
		}
	})
}

func TestPeekSharedScopeAndMiddleware(t *testing.T) {
	t.Parallel()
	inspectBackends(t, func(t *testing.T, client *redis.Client) {
		lim, err := slidelimit.New(client, slidelimit.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		mux := http.NewServeMux()
		// Two routes sharing a scope, with different windows for "user".
		if err := lim.Handle(mux, "POST /pictures", ok, "user:2/min,10/h; scope:uploads"); err != nil {
			t.Fatal(err)
		}
		if err := lim.Handle(mux, "POST /videos", ok, "user:3/min,5/h; scope:uploads"); err != nil {
			t.Fatal(err)
		}
		// Middleware with a scope: statement is found under it.
		mw, err := lim.Middleware("ip:3/min,30/h; scope:chi-files")
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle("GET /chi/", mw(ok))
		bob := ident("bob", "user")
		for _, target := range []string{"/pictures", "/videos"} {
			r := httptest.NewRequest("POST", target, nil).WithContext(role.NewContext(context.Background(), *bob))
			mux.ServeHTTP(httptest.NewRecorder(), r)
		}
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/chi/x", nil))

		wantWindows(t, "shared scope", peek(t, lim, false, "uploads", "user", "bob"),
			"0:2/min used=2 rem=0", "0:3/min used=2 rem=1", "0:5/h used=2 rem=3", "0:10/h used=2 rem=8")
		wantWindows(t, "middleware scope", peek(t, lim, false, "chi-files", "ip", "192.0.2.1"), "0:3/min used=1 rem=2", "0:30/h used=1 rem=29")
		if _, err := lim.Peek(context.Background(), "POST /pictures", "user", "bob", false); !isKind(err, "scope") {
			t.Errorf("the pattern of a route with a scope: statement is not its scope: %v", err)
		}

		// Middleware whose scope is decided per request may serve any scope.
		mw, err = lim.Middleware("param(id):3/h", middleware.WithScope("dynamic"))
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle("GET /dyn/{id}", mw(ok))
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/dyn/7", nil))
		wantWindows(t, "middleware without scope: statement", peek(t, lim, false, "dynamic", "param(id)", "7"), "0:3/h used=1 rem=2")
		wantWindows(t, "any scope", peek(t, lim, false, "anything", "param(id)", "7"), "0:3/h used=0 rem=3")
	})
}

func TestPeekErrors(t *testing.T) {
	t.Parallel()
	lim := offline(t) // every error is found before Redis is asked
	if err := lim.Register(http.NewServeMux(), &inspectAPI{ok, ok, ok}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		scope, id, subject string
		byIP               bool
		want               error // a ConfigError of kind, or matched by errors.Is
		kind               string
		text               string
	}{
		{"GET /nope", "ip", "192.0.2.1", false, nil, "scope", `slidelimit: unknown scope "GET /nope"`},
		{"", "ip", "192.0.2.1", false, nil, "scope", `slidelimit: unknown scope ""`},
		{"GET /health", "ip", "192.0.2.1", false, nil, "scope", `unknown scope "GET /health"`},
		{filesScope, "global", "", false, nil, "limiter", `slidelimit: unknown limiter "global" in scope "GET /files/{id}"`},
		{filesScope, "header(X-Api-Key)", "k", false, nil, "limiter", `unknown limiter "header(X-Api-Key)" in scope`},
		{filesScope, "bogus", "x", false, nil, "limiter", `unknown limiter "bogus": not a rule ID`},
		{filesScope, "", "x", false, nil, "limiter", `unknown limiter "": not a rule ID`},
		{filesScope, "ip:5/s", "x", false, nil, "limiter", "not a rule ID"},
		{filesScope, "ip; user", "x", false, nil, "limiter", "not a rule ID"},
		{filesScope, "header(X-A", "x", false, nil, "limiter", "not a rule ID"},
		{filesScope, "ip", "localhost", false, lifecycle.ErrSubject, "", `slidelimit: limiter ip: middleware: invalid subject: "localhost" is not an IP address`},
		{filesScope, "user", "", false, lifecycle.ErrSubject, "", "empty user value"},
		{filesScope, "user", "alice", true, lifecycle.ErrSubject, "", `"alice" is not an IP address`},
		{"GET /keys", "global", "192.0.2.1", true, lifecycle.ErrSubject, "", "global limiter never counts by client IP"},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%q %q %q byIP=%v", tt.scope, tt.id, tt.subject, tt.byIP)
		_, perr := lim.Peek(context.Background(), tt.scope, tt.id, tt.subject, tt.byIP)
		rerr := lim.Reset(context.Background(), tt.scope, tt.id, tt.subject, tt.byIP)
		for op, err := range map[string]error{"Peek": perr, "Reset": rerr} {
			matches := errors.Is(err, tt.want)
			if tt.want == nil {
				matches = isKind(err, tt.kind)
			}
			if !matches || !contains(err, tt.text) {
				t.Errorf("%s %s: %v, want %v (kind %q) containing %q", op, name, err, tt.want, tt.kind, tt.text)
			}
		}
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// TestPeekConcurrentWithRegister runs Peek while routes are being
// registered, for the race detector.
func TestPeekConcurrentWithRegister(t *testing.T) {
	t.Parallel()
	_, client := redistest.Mini(t)
	lim, err := slidelimit.New(client, slidelimit.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	if err := lim.Handle(http.NewServeMux(), "GET /a", ok, "ip:5/min"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if err := lim.Handle(http.NewServeMux(), fmt.Sprintf("GET /r%d", i), ok, "ip:5/min"); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := lim.Peek(context.Background(), "GET /a", "ip", "192.0.2.1", false); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if _, err := lim.Peek(context.Background(), "GET /r7", "ip", "192.0.2.1", false); err != nil {
		t.Error(err)
	}
}

func ExampleLimiter_Peek() {
	mr, err := miniredis.Run() // an in-process Redis for the example; use your own
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	lim, err := slidelimit.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	mux := http.NewServeMux()
	if err := lim.Handle(mux, "GET /files/{id}", ok, "user:10/min,200/d; role(trial)=user:3/min"); err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"1", "2"} {
		r := httptest.NewRequest("GET", "/files/"+id, nil)
		r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: "alice"}))
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}

	// The union of the windows of "user" in the scope: the trial role's
	// 3/min as well as the defaults.
	d, err := lim.Peek(context.Background(), "GET /files/{id}", "user", "alice", false)
	if err != nil {
		log.Fatal(err)
	}
	for _, w := range d.Windows {
		fmt.Printf("%s: used %d, %d remaining\n", w.Window, w.Used, w.Remaining)
	}
	if err := lim.Reset(context.Background(), "GET /files/{id}", "user", "alice", false); err != nil {
		log.Fatal(err)
	}
	d, _ = lim.Peek(context.Background(), "GET /files/{id}", "user", "alice", false)
	fmt.Println("after Reset:", d.Windows[0].Used)
	// Output:
	// 3/min: used 2, 1 remaining
	// 10/min: used 2, 8 remaining
	// 200/d: used 2, 198 remaining
	// after Reset: 0
}
