package slidelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/rulelimits"
)

// windowList returns n windows "1/1ms,1/2ms,...", each of its own period.
func windowList(n int) string {
	ws := make([]string, n)
	for i := range ws {
		ws[i] = "1/" + strconv.Itoa(i+1) + "ms"
	}
	return strings.Join(ws, ",")
}

// headerRules returns n rules header(X-H0)..., each with per
// windows. A request without the header counts by its client address.
func headerRules(n, per int) string {
	ls := make([]string, n)
	for i := range ls {
		ls[i] = "header(X-H" + strconv.Itoa(i) + "):" + windowList(per)
	}
	return strings.Join(ls, "; ")
}

// tagged returns a pointer to a struct with one handler field, Big,
// whose tags are route and limit.
func tagged(route, limit string) any {
	typ := reflect.StructOf([]reflect.StructField{{
		Name: "Big",
		Type: reflect.TypeFor[http.HandlerFunc](),
		Tag:  reflect.StructTag(`route:"` + route + `" limit:"` + limit + `"`),
	}})
	v := reflect.New(typ)
	v.Elem().Field(0).Set(reflect.ValueOf(ok))
	return v.Interface()
}

// TestRuleSizeRefused checks that a group with more windows or rules
// than the engine takes in one request fails Register, Handle and
// Middleware, naming the bound and the count, and registers nothing: such
// a group used to be accepted, and every request then failed with 500.
func TestRuleSizeRefused(t *testing.T) {
	t.Parallel()
	lim := offline(t)
	for _, tt := range []struct {
		name, text, want string
	}{
		{"windows", "ip:" + windowList(300), "group has 300 windows, at most 256"},
		{"limiters", headerRules(65, 1), "group has 65 rules, at most 64"},
		{"role rules", "ip:1/s; role(admin)=user:" + windowList(257), "role(admin)= has 257 windows, at most 256"},
		{"distinct", "user:" + windowList(31) + "; distinct:path", "in 31 windows, at most 30"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check := func(call string, err error) {
				t.Helper()
				if !isError(err, errRuleInvalid) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("%s = %.300v, want errRuleInvalid saying %q", call, err, tt.want)
				}
			}
			mux := http.NewServeMux()
			check("Handle", lim.Handle(mux, "GET /handle", ok, tt.text))
			err := lim.Register(mux, tagged("GET /register", tt.text))
			check("Register", err)
			if err != nil && !strings.Contains(err.Error(), "Big: tag limit:") {
				t.Errorf("Register's error does not name the field and tag: %.300v", err)
			}
			_, err = lim.Middleware(tt.text)
			check("Middleware", err)
			if registered(mux, "GET", "/handle") || registered(mux, "GET", "/register") {
				t.Error("a route was registered")
			}
		})
	}
}

// TestRuleSizeAtBound checks that groups at the bounds are served, and
// exactly, on a real Redis, on miniredis and on a 3-master Cluster: the
// rule language's bounds are the engine's, not stricter. A request of 64
// rules with an in-flight and a rate window each has 128 keys; on a
// Cluster, keys past the 64th were sent twice (a bitmask of 64 bits),
// counting the request twice.
func TestRuleSizeAtBound(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		lim, err := slidelimit.New(srv.Client())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		serveAtBound(t, lim)
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		serveAtBound(t, onMiniredis(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		lim, err := slidelimit.New(cl.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		serveAtBound(t, lim)
	})
}

func serveAtBound(t *testing.T, lim *slidelimit.Limiter) {
	keys := make([]string, rulelimits.MaxRules)
	for i := range keys {
		keys[i] = "header(X-H" + strconv.Itoa(i) + "):1 concurrent,2/min"
	}
	mux := http.NewServeMux()
	for _, tt := range []struct {
		path, text, want string
	}{
		{"/windows", "ip:1 concurrent," + windowList(rulelimits.MaxWindows-1), "200"},
		{"/limiters", headerRules(rulelimits.MaxRules, rulelimits.MaxWindows/rulelimits.MaxRules), "200"},
		{"/distinct", "user:1 concurrent," + windowList(rulelimits.MaxDistinctWindows) + "; distinct:path", "200"},
		{"/role-rules", "ip:1/s; role(admin)=user:" + windowList(rulelimits.MaxWindows), "200"},
		{"/keys", strings.Join(keys, "; "), "200 200 429"},
	} {
		if err := lim.Handle(mux, "GET "+tt.path, ok, tt.text); err != nil {
			t.Fatalf("Handle(%s): %.300v", tt.path, err)
		}
		var got []string
		for range strings.Count(tt.want, " ") + 1 {
			r := httptest.NewRequest("GET", tt.path, nil)
			r.RemoteAddr = "192.0.2.1:1"
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			got = append(got, strconv.Itoa(w.Code))
		}
		if g := strings.Join(got, " "); g != tt.want {
			t.Errorf("GET %s: %s, want %s", tt.path, g, tt.want)
		}
	}
}

// TestSetRulesSize checks that SetRules refuses a group beyond the bounds
// and changes nothing, and that a process reading such an override from
// Redis (written by hand, or by a process that did not check) keeps the
// rules it enforced, logging one error, instead of failing every request.
func TestSetRulesSize(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client()
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	p := newProcess(t, rdb, prefix, withRulesCheck(50*time.Millisecond))
	if err := p.lim.SetRules(ctx, "GET /search", "ip:2/min"); err != nil {
		t.Fatal(err)
	}
	before, err := rulesOf(ctx, p.lim)
	if err != nil {
		t.Fatal(err)
	}
	big := "ip:" + windowList(1000)
	err = p.lim.SetRules(ctx, "GET /search", big)
	if !isError(err, errRuleInvalid) || !strings.Contains(err.Error(), "group has 1000 windows, at most 256") {
		t.Errorf("SetRules(1000 windows) = %.300v", err)
	}
	if after, err := rulesOf(ctx, p.lim); err != nil || !reflect.DeepEqual(after, before) {
		t.Errorf("the refused SetRules changed the overrides: %+v %v, want %+v", after, err, before)
	}
	if got := p.gets("192.0.2.1", 3); got != "200 200 429" {
		t.Errorf("after the refused SetRules: %s, want ip:2/min", got)
	}

	// Written to Redis behind SetRules's back: the version check finds it.
	if err := rdb.HSet(ctx, prefix+"{rules}", "GET /search", big).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Incr(ctx, prefix+"{rules}version").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the process reads the oversized override", func() bool {
		return strings.Contains(p.logs.String(), "rule override not applied")
	})
	if got := p.gets("192.0.2.2", 3); got != "200 200 429" {
		t.Errorf("with an oversized override in redis: %s, want ip:2/min kept", got)
	}
	// Another change later applies, and the rejection is not logged again.
	if err := rdb.HSet(ctx, prefix+"{rules}", "other", "ip:1/s").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Incr(ctx, prefix+"{rules}version").Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Eventually(t, "the process applies the next version", func() bool {
		return strings.Contains(p.logs.String(), `scope=other`)
	})
	if l := p.logs.String(); strings.Count(l, "rule override not applied") != 1 || !strings.Contains(l, "group has 1000 windows, at most 256") {
		t.Errorf("want one error line naming the bound:\n%.2000s", l)
	}
	if got := p.gets("192.0.2.3", 3); got != "200 200 429" {
		t.Errorf("after the next version: %s, want ip:2/min kept", got)
	}

	// A process started now never enforced the override: the code's rules.
	q := newProcess(t, rdb, prefix)
	if got := q.gets("192.0.2.4", 3); got != "200 200 200" {
		t.Errorf("a new process: %s, want the code's ip:100/min", got)
	}
	if l := q.logs.String(); strings.Count(l, "rule override not applied") != 1 {
		t.Errorf("a new process: want one error line:\n%.2000s", l)
	}
}
