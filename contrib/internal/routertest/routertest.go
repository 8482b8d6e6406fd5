// Package routertest runs the same scenarios against every router adapter,
// over miniredis.
package routertest

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
)

// Counts are what a router's chain saw.
type Counts struct {
	Later   atomic.Int64 // requests that reached the middleware after the Limiter
	Reached atomic.Int64 // requests that reached the handler

	mu     sync.Mutex
	scopes []string // of every decision, from the Limiter's hook
}

func (c *Counts) hook(ev middleware.Event) {
	c.mu.Lock()
	c.scopes = append(c.scopes, ev.Scope)
	c.mu.Unlock()
}

// Build returns a router serving GET /files/{id} (in the router's own
// syntax) through the Limiter for rulesText, then a middleware that adds to
// c.Later, then a handler that adds to c.Reached and answers with the
// status in the query parameter "status" (200 without one).
type Build func(t *testing.T, lim *slidelimit.Limiter, rulesText string, c *Counts) http.Handler

// Status is the handler's answer for r.
func Status(r *http.Request) int {
	if s, err := strconv.Atoi(r.URL.Query().Get("status")); err == nil {
		return s
	}
	return http.StatusOK
}

// NewLimiter returns a Limiter on a fresh miniredis.
func NewLimiter(t *testing.T, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rc.Close() })
	lim, err := slidelimit.New(rc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

// Run runs every scenario on the routers build makes; scope is the scope
// the adapter must report for the route.
func Run(t *testing.T, scope string, build Build) {
	tests := []struct {
		name    string
		rules   string
		user    string // "root" is exempt where the rules say so
		paths   []string
		codes   []int
		reached int64
	}{
		{"paths of a route share its windows", "ip:2/min", "", []string{"/files/1", "/files/2", "/files/3"}, []int{200, 200, 429}, 2},
		{"param counts per value", "param(id):1/min", "", []string{"/files/1", "/files/1", "/files/2", "/files/2"}, []int{200, 429, 200, 429}, 2},
		{"exempt role passes", "ip:1/min; exempt:root", "root", []string{"/files/1", "/files/1", "/files/1"}, []int{200, 200, 200}, 3},
		{"others are limited", "ip:1/min; exempt:root", "alice", []string{"/files/1", "/files/1"}, []int{200, 429}, 1},
		{"count gives back other statuses", "ip:1/min; count:401", "", []string{"/files/1", "/files/1", "/files/1?status=401", "/files/1"}, []int{200, 200, 401, 429}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var c Counts
			h := build(t, NewLimiter(t, slidelimit.WithHook(c.hook)), tt.rules, &c)
			var got []int
			for _, p := range tt.paths {
				r := httptest.NewRequest("GET", p, nil)
				r.RemoteAddr = "192.0.2.1:1234"
				if tt.user != "" {
					r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: tt.user, Roles: []role.Role{role.Role(tt.user)}}))
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				got = append(got, w.Code)
			}
			if !slices.Equal(got, tt.codes) {
				t.Errorf("statuses %v, want %v", got, tt.codes)
			}
			if n := c.Reached.Load(); n != tt.reached {
				t.Errorf("%d requests reached the handler, want %d", n, tt.reached)
			}
			if n := c.Later.Load(); n != tt.reached {
				t.Errorf("%d requests reached the later middleware, want %d", n, tt.reached)
			}
			for _, s := range c.scopes {
				if s != scope && !(tt.user == "root" && s == "") { // exempt requests have no scope
					t.Errorf("scope %q, want %q", s, scope)
				}
			}
		})
	}
}
