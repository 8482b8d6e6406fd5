package routertest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/role"
)

// Sequence sends the scripted traffic of the metrics tests to a ServeMux
// limited by a Limiter made with opt (the metrics hook), on miniredis:
//
//	GET /a  ip:2/min               3 requests: 2 allowed, 1 denied (policy ip-1min)
//	GET /s  ip:1/min; mode:shadow  2 requests: 1 allowed, 1 shadow_denied
//	GET /x  ip:1/min; exempt:root  2 requests as root: 2 exempt
//	GET /c  ip:5/min; fail:closed  1 request with Redis gone: denied by fail-closed, a backend error
//
// The denials of /a and /s come from the engine's cache of Redis's answers
// (source "cache"): the request before them filled the window.
func Sequence(t *testing.T, opt slidelimit.Option) {
	t.Helper()
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	lim, err := slidelimit.New(rc, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	for pattern, rules := range map[string]string{
		"GET /a": "ip:2/min",
		"GET /s": "ip:1/min; mode:shadow",
		"GET /x": "ip:1/min; exempt:root",
		"GET /c": "ip:5/min; fail:closed",
	} {
		if err := lim.Handle(mux, pattern, ok, rules); err != nil {
			t.Fatal(err)
		}
	}
	send := func(path string, root bool) {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = "192.0.2.1:1234"
		if root {
			r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: "root", Roles: []role.Role{"root"}}))
		}
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	for range 3 {
		send("/a", false)
	}
	send("/s", false)
	send("/s", false)
	send("/x", true)
	send("/x", true)
	m.Close() // Redis goes away
	send("/c", false)
}
