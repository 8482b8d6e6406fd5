package middleware_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// sizeCost is a cost function reading the size from the X-Size header, as a
// download handler would read the object's size; it counts its calls.
type sizeCost struct{ calls atomic.Int64 }

var errNoObject = errors.New("storage: stat /objects/7: connection reset")

func (s *sizeCost) fn(r *http.Request) (int64, error) {
	s.calls.Add(1)
	switch v := r.Header.Get("X-Size"); v {
	case "fail":
		return 0, errNoObject
	case "bad":
		return 0, fmt.Errorf("range %q: %w", r.Header.Get("Range"), middleware.ErrBadRequest)
	default:
		return strconv.ParseInt(v, 10, 64)
	}
}

// recorder is a Decider that records the requests it is asked to decide
// (from one goroutine at a time) and answers with dec.
type recorder struct {
	funcDecider
	reqs []engine.Request
}

func newRecorder(dec func(engine.Request) engine.Decision) *recorder {
	r := &recorder{}
	r.allow = func(req engine.Request) (engine.Decision, error) {
		r.reqs = append(r.reqs, req)
		return dec(req), nil
	}
	return r
}

// admitted admits req with one fresh entry in every window.
func admitted(req engine.Request) engine.Decision {
	d := engine.Decision{Allowed: true}
	for i, c := range req.Checks {
		for _, w := range c.Windows {
			d.Windows = append(d.Windows, engine.WindowState{Check: i, Window: w, Used: 1, Remaining: w.Limit - 1, Reset: w.Period})
		}
	}
	return d
}

// TestCostReachesEngine checks that every check carries its cost: 0 for a
// rule without cost, the constant for ip[5], the function's value for
// user[bytes] and key(k)[bytes] (the function called once), in defaults and
// overrides.
func TestCostReachesEngine(t *testing.T) {
	t.Parallel()
	var size sizeCost
	d := newRecorder(admitted)
	mw, err := middleware.New(rules.MustParse("user:10/min; user[bytes]:2Gi/d~1h; ip[5]:100/min; key(k)[bytes]:1Gi/d; role(a)=user[bytes]:1Gi/d & user[3]:9/s"), d,
		middleware.WithCostFunc("bytes", size.fn),
		middleware.WithKeyFunc("k", func(*http.Request) string { return "acme" }))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /files/{id}", mw(okHandler))
	r := request("GET", "/files/7", "192.0.2.1:1", user("alice"))
	r.Header.Set("X-Size", "123456789")
	if w := do(mux, r); w.Code != ok {
		t.Fatalf("status %d", w.Code)
	}
	r = request("GET", "/files/7", "192.0.2.1:1", user("bob", "a"))
	r.Header.Set("X-Size", "42")
	if w := do(mux, r); w.Code != ok {
		t.Fatalf("status %d", w.Code)
	}
	if len(d.reqs) != 2 {
		t.Fatalf("%d engine calls, want 2", len(d.reqs))
	}
	type got struct {
		id   string
		cost int64
	}
	var checks [][]got
	for _, req := range d.reqs {
		var cs []got
		for _, c := range req.Checks {
			cs = append(cs, got{c.ID(), c.Cost})
		}
		checks = append(checks, cs)
	}
	want := [][]got{
		{{"user", 0}, {"user[bytes]", 123456789}, {"ip[5]", 5}, {"key(k)[bytes]", 123456789}},
		{{"user[bytes]", 42}, {"user[3]", 3}},
	}
	if !slices.EqualFunc(checks, want, slices.Equal) {
		t.Errorf("checks = %v, want %v", checks, want)
	}
	if n := size.calls.Load(); n != 2 {
		t.Errorf("cost function called %d times for 2 requests, want 2", n)
	}
	if c := d.reqs[0].Checks[1]; c.Rule.Cost != "bytes" || c.Windows[0].Grain != time.Hour {
		t.Errorf("check limiter = %+v", c.Rule)
	}
}

// TestCostHeaders checks the advertised policies and service limits of a
// group mixing units: requests (with a constant cost advertised in
// requests), content-bytes, and a cost function whose unit the draft does
// not know, which is not advertised.
func TestCostHeaders(t *testing.T) {
	t.Parallel()
	const group = "user:10/min; user[bytes]:2Gi/d; ip[5]:100/min; user[tokens]:1000/h"
	states := func(req engine.Request) []engine.WindowState {
		w := func(c int) rules.Window { return req.Checks[c].Windows[0] }
		return []engine.WindowState{
			{Check: 0, Window: w(0), Used: 3, Remaining: 7, Reset: 20 * time.Second},
			{Check: 1, Window: w(1), Used: 1000, Remaining: 2<<30 - 1000, Reset: 5 * time.Hour},
			{Check: 2, Window: w(2), Used: 62, Remaining: 38, Reset: 30500 * time.Millisecond},
			{Check: 3, Window: w(3), Used: 999, Remaining: 1, Reset: time.Minute},
		}
	}
	var size sizeCost
	tokens := middleware.WithCostFunc("tokens", func(*http.Request) (int64, error) { return 1, nil })
	wantPolicy := `"user-1min";q=10;w=60, "user[bytes]-1d";q=2147483648;qu="content-bytes";w=86400, "ip[5]-1min";q=20;w=60`

	t.Run("allowed", func(t *testing.T) {
		t.Parallel()
		d := newRecorder(func(req engine.Request) engine.Decision {
			return engine.Decision{Allowed: true, Windows: states(req)}
		})
		mux := routed(t, "GET /", group, d, middleware.WithCostFunc("bytes", size.fn), tokens, middleware.WithLegacyHeaders())
		r := request("GET", "/", "192.0.2.1:1", user("alice"))
		r.Header.Set("X-Size", "1000")
		w := do(mux, r)
		if got := w.Header().Get("RateLimit-Policy"); got != wantPolicy {
			t.Errorf("RateLimit-Policy = %s\nwant %s", got, wantPolicy)
		}
		parsePolicy(t, w.Header().Values("RateLimit-Policy"))
		// Requests: user-1min has 7 left, ip[5]-1min 38 units = 7 requests
		// too; the tie goes to the longer effective window (30.5s).
		// Bytes: the only bytes window. tokens: not advertised.
		want := []serviceLimit{{"ip[5]-1min", 7, 31, true}, {"user[bytes]-1d", 2<<30 - 1000, 18000, true}}
		if got := parseRateLimit(t, w.Header().Values("RateLimit")); !slices.Equal(got, want) {
			t.Errorf("RateLimit = %+v, want %+v", got, want)
		}
		if l, rem := w.Header().Get("X-RateLimit-Limit"), w.Header().Get("X-RateLimit-Remaining"); l != "20" || rem != "7" {
			t.Errorf("legacy limit %q remaining %q, want 20 and 7 (requests of ip[5])", l, rem)
		}
	})

	deny := func(t *testing.T, check int, wait time.Duration) *http.Response {
		t.Helper()
		d := newRecorder(func(req engine.Request) engine.Decision {
			dec := engine.Decision{Windows: states(req), RetryAfter: wait}
			dec.Denied = dec.Windows[check]
			return dec
		})
		var rec testutil.Events
		mux := routed(t, "GET /", group, d, middleware.WithCostFunc("bytes", size.fn), tokens, middleware.WithHook(rec.Hook))
		r := request("GET", "/", "192.0.2.1:1", user("alice"))
		r.Header.Set("X-Size", "1000000000") // fits in 2Gi/d: the decider denies
		res := do(mux, r).Result()
		if ev := rec.All(); len(ev) != 1 || ev[0].Status != http.StatusTooManyRequests || ev[0].Rule != d.reqs[0].Checks[check].ID() {
			t.Errorf("events = %+v", ev)
		}
		return res
	}
	body := func(t *testing.T, res *http.Response) problemBody {
		t.Helper()
		var p problemBody
		if err := json.NewDecoder(res.Body).Decode(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("denied by bytes", func(t *testing.T) {
		t.Parallel()
		res := deny(t, 1, 3*time.Hour+time.Millisecond)
		if got := res.Header.Get("Retry-After"); got != "10801" {
			t.Errorf("Retry-After = %q, want 10801", got)
		}
		want := []serviceLimit{{"user[bytes]-1d", 2<<30 - 1000, 10801, true}}
		if got := parseRateLimit(t, res.Header.Values("RateLimit")); !slices.Equal(got, want) {
			t.Errorf("RateLimit = %+v, want %+v", got, want)
		}
		p := body(t, res)
		if !slices.Equal(p.ViolatedPolicies, []string{"user[bytes]-1d"}) || !strings.Contains(p.Detail, "(2147483648 bytes per 1d)") {
			t.Errorf("problem = %+v", p)
		}
	})
	t.Run("denied by constant cost", func(t *testing.T) {
		t.Parallel()
		res := deny(t, 2, 30500*time.Millisecond)
		want := []serviceLimit{{"ip[5]-1min", 7, 31, true}}
		if got := parseRateLimit(t, res.Header.Values("RateLimit")); !slices.Equal(got, want) {
			t.Errorf("RateLimit = %+v, want %+v", got, want)
		}
		if p := body(t, res); !strings.Contains(p.Detail, "(100 units at 5 per request per 1min)") {
			t.Errorf("problem = %+v", p)
		}
	})
	t.Run("costs more than the whole quota", func(t *testing.T) {
		t.Parallel()
		d := newRecorder(func(req engine.Request) engine.Decision {
			t.Error("the engine was asked about a request that can never fit")
			return engine.Decision{Allowed: true, Windows: states(req)}
		})
		var rec testutil.Events
		var denial middleware.Denial
		mux := routed(t, "GET /", group, d, middleware.WithCostFunc("bytes", size.fn), tokens, middleware.WithHook(rec.Hook),
			middleware.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, dn middleware.Denial) {
				denial = dn
				middleware.WriteProblem(w, r, dn)
			}))
		r := request("GET", "/", "192.0.2.1:1", user("alice"))
		r.Header.Set("X-Size", "5000000000") // above 2Gi
		res := do(mux, r).Result()
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "" {
			t.Errorf("status %d, Retry-After %q; want 429 without Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
		}
		if !denial.Never || denial.Policy != "user[bytes]-1d" || denial.RetryAfter != 0 {
			t.Errorf("denial = %+v, want Never for user[bytes]-1d", denial)
		}
		if ev := rec.All(); len(ev) != 1 || ev[0].Status != http.StatusTooManyRequests || ev[0].Policy != "user[bytes]-1d" {
			t.Errorf("events = %+v", ev)
		}
		if p := body(t, res); !strings.Contains(p.Detail, "can never be admitted") || !slices.Equal(p.ViolatedPolicies, []string{"user[bytes]-1d"}) {
			t.Errorf("problem = %+v", p)
		}
	})
	t.Run("denied by an unadvertised unit", func(t *testing.T) {
		t.Parallel()
		res := deny(t, 3, time.Minute)
		if got := res.Header.Values("RateLimit"); got != nil {
			t.Errorf("RateLimit = %q, want none: the tokens unit is not advertised", got)
		}
		if got := res.Header.Get("RateLimit-Policy"); got != wantPolicy {
			t.Errorf("RateLimit-Policy = %s", got)
		}
		if got := res.Header.Get("Retry-After"); got != "60" {
			t.Errorf("Retry-After = %q, want 60", got)
		}
		p := body(t, res)
		if !slices.Equal(p.ViolatedPolicies, []string{"user[tokens]-1h"}) || !strings.Contains(p.Detail, "(1000 units of cost tokens per 1h)") {
			t.Errorf("problem = %+v", p)
		}
	})
}

// TestCostFuncErrors checks the answers to a cost function that fails or
// returns a cost below 1: 500 (400 for ErrCostBadRequest), the error logged
// and reported to hooks but never written to the client, the engine not
// called; in shadow mode the handler serves the request uncounted.
func TestCostFuncErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		size   string
		status int
		log    string
	}{
		{"fail", http.StatusInternalServerError, "connection reset"},
		{"bad", http.StatusBadRequest, "middleware: bad request"},
		{"0", http.StatusInternalServerError, "returned cost 0, want at least 1"},
		{"-5", http.StatusInternalServerError, "returned cost -5, want at least 1"},
	}
	for _, tt := range tests {
		for _, shadow := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s shadow=%v", tt.size, shadow), func(t *testing.T) {
				t.Parallel()
				var size sizeCost
				d := newRecorder(admitted)
				logger, logs := newLogger()
				var rec testutil.Events
				group := "user:10/min; user[bytes]:2Gi/d"
				if shadow {
					group += "; mode:shadow"
				}
				mux := routed(t, "GET /", group, d, middleware.WithCostFunc("bytes", size.fn),
					middleware.WithLogger(logger), middleware.WithHook(rec.Hook))
				r := request("GET", "/", "192.0.2.1:1", user("alice"))
				r.Header.Set("X-Size", tt.size)
				r.Header.Set("Range", "bytes=oops")
				w := do(mux, r)
				want := tt.status
				if shadow {
					want = ok
				}
				if w.Code != want {
					t.Fatalf("status %d, want %d", w.Code, want)
				}
				if !shadow {
					var p problemBody
					if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != tt.status || p.Type != "about:blank" {
						t.Errorf("body %q: %+v %v", w.Body, p, err)
					}
					if b := w.Body.String(); strings.Contains(b, "storage") || strings.Contains(b, "oops") || strings.Contains(b, "cost") {
						t.Errorf("internal error leaked to the client: %s", b)
					}
					if w.Header().Get("RateLimit") != "" || w.Header().Get("Retry-After") != "" {
						t.Errorf("rate-limit fields on a request that was not decided: %v", w.Header())
					}
				}
				if len(d.reqs) != 0 {
					t.Errorf("engine called %d times", len(d.reqs))
				}
				if !strings.Contains(logs.String(), tt.log) || !strings.Contains(logs.String(), "user[bytes]") {
					t.Errorf("log = %q, want %q and the limiter", logs, tt.log)
				}
				ev := rec.All()
				if len(ev) != 1 || !errors.Is(ev[0].Err, lifecycle.ErrCost) || ev[0].Allowed != shadow {
					t.Fatalf("events = %+v", ev)
				}
				var ce *lifecycle.CostError
				if !errors.As(ev[0].Err, &ce) || ce.Name != "bytes" || ce.Rule != "user[bytes]" {
					t.Errorf("event error = %#v", ev[0].Err)
				}
				if tt.size == "fail" && !errors.Is(ev[0].Err, errNoObject) {
					t.Errorf("event error %v does not wrap the function's error", ev[0].Err)
				}
				if !shadow && ev[0].Status != tt.status {
					t.Errorf("event status %d", ev[0].Status)
				}
			})
		}
	}
}

// TestCostFuncConfig checks that New names every rule whose cost
// function is missing, and rejects bad WithCostFunc arguments.
func TestCostFuncConfig(t *testing.T) {
	t.Parallel()
	_, err := middleware.New(rules.MustParse("user[bytes]:1Gi/d; ip[3]:9/s; role(a)=key(k)[tokens]:5/s"), newMem(),
		middleware.WithKeyFunc("k", func(*http.Request) string { return "" }))
	for _, want := range []string{
		`middleware: unknown cost function "bytes" in rule user[bytes] (use WithCostFunc)`,
		`middleware: unknown cost function "tokens" in rule key(k)[tokens] of role(a)= (use WithCostFunc)`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New error %v\nwant it to contain %s", err, want)
		}
	}
	if ce := testutil.ConfigError(err, "unregistered", "WithCostFunc"); ce == nil || ce.Name != "bytes" {
		t.Errorf("error %v holds no *ConfigError naming the cost function", err)
	}
	if err != nil && strings.Contains(err.Error(), "ip[3]") {
		t.Errorf("a constant cost needs no function: %v", err)
	}

	one := func(*http.Request) (int64, error) { return 1, nil }
	for _, tt := range []struct {
		name string
		fn   func(*http.Request) (int64, error)
		want string
	}{
		{"bytes", nil, `middleware: WithCostFunc("bytes"): nil cost function`},
		{"5", one, `middleware: WithCostFunc("5"): invalid cost function name; want a letter, then letters, digits, "_", "-" or "."`},
		{"", one, `middleware: WithCostFunc(""): invalid cost function name; want a letter, then letters, digits, "_", "-" or "."`},
		{"a b", one, `middleware: WithCostFunc("a b"): invalid cost function name; want a letter, then letters, digits, "_", "-" or "."`},
	} {
		_, err := middleware.New(rules.MustParse("ip:1/s"), newMem(), middleware.WithCostFunc(tt.name, tt.fn))
		if err == nil || err.Error() != tt.want || testutil.ConfigError(err, "option", "") == nil {
			t.Errorf("WithCostFunc(%q): %v, want %s", tt.name, err, tt.want)
		}
	}
	if _, err := middleware.New(rules.MustParse("ip:1/s; user[b.2-x_y]:1/s"), newMem(), middleware.WithCostFunc("b.2-x_y", one)); err != nil {
		t.Errorf("valid name: %v", err)
	}
}
