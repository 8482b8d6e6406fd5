package slidelimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/middleware"
)

// byHeader is the test's authentication: it trusts X-User and X-Role.
func byHeader(r *http.Request) (string, []string) {
	if u := r.Header.Get("X-User"); u != "" {
		return u, strings.Fields(r.Header.Get("X-Role"))
	}
	return "", nil
}

func serve(h http.Handler, user, roles, ip string) int {
	req := httptest.NewRequest("GET", "/files/1", nil)
	req.RemoteAddr = ip + ":1234"
	if user != "" {
		req.Header.Set("X-User", user)
		req.Header.Set("X-Role", roles)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// TestWithIdentity checks that the identity WithIdentity finds reaches the
// limiter through each way of wrapping a handler: users are counted by
// user id across addresses, and an exempt role is never limited.
func TestWithIdentity(t *testing.T) {
	t.Parallel()
	const group = "user:1/min; exempt:superadmin"
	ways := map[string]func(lim *slidelimit.Limiter) http.Handler{
		"Handle": func(lim *slidelimit.Limiter) http.Handler {
			mux := http.NewServeMux()
			if err := lim.Handle(mux, "GET /files/{id}", ok, group); err != nil {
				t.Fatal(err)
			}
			return mux
		},
		"Register": func(lim *slidelimit.Limiter) http.Handler {
			type api struct {
				Files http.HandlerFunc `route:"GET /files/{id}" limit:"user:1/min; exempt:superadmin"`
			}
			mux := http.NewServeMux()
			if err := lim.Register(mux, &api{Files: ok}); err != nil {
				t.Fatal(err)
			}
			return mux
		},
		"Middleware": func(lim *slidelimit.Limiter) http.Handler {
			mw, err := lim.Middleware(group + "; scope:files")
			if err != nil {
				t.Fatal(err)
			}
			return mw(ok)
		},
	}
	for name, wrap := range ways {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := wrap(onMiniredis(t, slidelimit.WithRoles("user", "superadmin"), slidelimit.WithIdentity(byHeader)))
			if c := serve(h, "alice", "user", "192.0.2.1"); c != http.StatusOK {
				t.Fatalf("alice's first request: %d", c)
			}
			// Another address, the same user: counted as alice.
			if c := serve(h, "alice", "user", "192.0.2.2"); c != http.StatusTooManyRequests {
				t.Errorf("alice's second request from another address: %d, want 429", c)
			}
			for range 3 {
				if c := serve(h, "root", "superadmin", "192.0.2.3"); c != http.StatusOK {
					t.Fatalf("exempt superadmin: %d", c)
				}
			}
		})
	}
}

// TestRootOptions checks that the root options reach the packages that
// own the settings: roles are declared, key and cost functions and hooks
// are used, and an invalid engine setting fails New.
func TestRootOptions(t *testing.T) {
	t.Parallel()
	lim := onMiniredis(t, slidelimit.WithRoles("user"))
	if err := lim.Handle(http.NewServeMux(), "GET /a", ok, "ip:1/s; exempt:admn"); err == nil {
		t.Error("WithRoles: an undeclared role was accepted")
	}

	var events atomic.Int64
	lim = onMiniredis(t,
		slidelimit.WithKeyFunc("tenant", func(r *http.Request) string { return "acme" }),
		slidelimit.WithCostFunc("size", func(r *http.Request) (int64, error) { return 3, nil }),
		slidelimit.WithHook(func(middleware.Event) { events.Add(1) }),
		slidelimit.WithKeyPrefix("rootopts:"),
		slidelimit.WithTimeout(5e9),
	)
	mux := http.NewServeMux()
	if err := lim.Handle(mux, "GET /files/{id}", ok, "key(tenant)[size]:5/min"); err != nil {
		t.Fatal(err)
	}
	if c := serve(mux, "", "", "192.0.2.1"); c != http.StatusOK {
		t.Fatalf("first request (cost 3 of 5): %d", c)
	}
	// The same tenant from another address: 3 more do not fit in 5.
	if c := serve(mux, "", "", "192.0.2.2"); c != http.StatusTooManyRequests {
		t.Errorf("second request of the tenant: %d, want 429", c)
	}
	if n := events.Load(); n != 2 {
		t.Errorf("hook saw %d events, want 2", n)
	}

	for name, o := range map[string]slidelimit.Option{
		"WithKeyPrefix": slidelimit.WithKeyPrefix("a{b}"),
		"WithTimeout":   slidelimit.WithTimeout(0),
		"WithFailMode":  slidelimit.WithFailMode("sideways"),
	} {
		if _, err := slidelimit.New(offlineClient(t), o); err == nil {
			t.Errorf("%s: New accepted an invalid value", name)
		}
	}
}

// offlineClient returns a client pointing nowhere, closed with the test.
func offlineClient(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestWithIdentityAdmin checks that the operator's page learns its caller
// from WithIdentity too.
func TestWithIdentityAdmin(t *testing.T) {
	t.Parallel()
	h := onMiniredis(t, slidelimit.WithIdentity(byHeader)).AdminHandler("ops")
	for _, tc := range []struct {
		user, roles string
		want        int
	}{{"", "", http.StatusUnauthorized}, {"bob", "user", http.StatusForbidden}, {"eve", "ops", http.StatusOK}} {
		req := httptest.NewRequest("GET", "/api/top", nil)
		if tc.user != "" {
			req.Header.Set("X-User", tc.user)
			req.Header.Set("X-Role", tc.roles)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("%s (%s): %d, want %d", tc.user, tc.roles, rec.Code, tc.want)
		}
	}
}
