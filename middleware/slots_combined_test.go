package middleware_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// comboServer serves h behind middleware for group text (scope "s") on a
// real HTTP server, deciding with an engine on a real redis-server. peek
// reports the windows of the loopback client's subjects without counting.
// A request's X-Test-Role header is its caller's role.
func comboServer(t *testing.T, text string, h http.HandlerFunc, opts ...middleware.Option) (srv *httptest.Server, peek func() engine.Decision) {
	t.Helper()
	e := testutil.NewEngine(t, redistest.Start(t).Client())
	g := rules.MustParse(text)
	mw, err := middleware.New(g, e, append([]middleware.Option{middleware.WithScope("s")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	inner := mw(h)
	// The test's authentication: the role a request names in X-Test-Role.
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ro := r.Header.Get("X-Test-Role"); ro != "" {
			r = r.WithContext(role.NewContext(r.Context(), role.Identity{Roles: []role.Role{role.Role(ro)}}))
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	peek = func() engine.Decision {
		t.Helper()
		var cs []engine.Check
		for _, l := range g.Rules {
			sub, err := subjectOf(l.Kind, "127.0.0.1")
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, engine.Check{Rule: l, Subject: sub, Block: g.Block})
		}
		d, err := enginePeek(e, context.Background(), engine.Request{Scope: "s", Checks: cs})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	return srv, peek
}

// used returns what window w (as written, "1min" or "concurrent") of the
// first rule with that window has used in d, or -1.
func used(d engine.Decision, w string) int64 {
	for _, ws := range d.Windows {
		if ws.Window.Concurrent && w == "concurrent" || !ws.Window.Concurrent && ruletime.FormatPeriod(ws.Window.Period) == w {
			return ws.Used
		}
	}
	return -1
}

// fetch gets url and returns the response with its body read and parsed as
// a problem when it is one.
func fetch(t *testing.T, url string) (*http.Response, problemBody) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var p problemBody
	if res.Header.Get("Content-Type") == "application/problem+json" {
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatalf("problem body %q: %v", body, err)
		}
	}
	return res, p
}

// TestComboSlotAndBlock: a group with a rate window, an in-flight window
// and a block. A slot denial names the in-flight policy with Retry-After 1
// and starts no block; a rate denial starts the block, whose denials say
// r=0, t and Retry-After of the block's time left and name the rate
// policy.
func TestComboSlotAndBlock(t *testing.T) {
	t.Parallel()
	entered, finish := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	srv, peek := comboServer(t, "ip:2/min,1 concurrent; block:5m", func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-finish
		}
		w.Write([]byte("ok"))
	})
	done := make(chan int, 1)
	go func() {
		res, err := http.Get(srv.URL)
		if err != nil {
			t.Error(err)
			done <- 0
			return
		}
		res.Body.Close()
		done <- res.StatusCode
	}()
	waitEntered(t, entered)
	const policy = `"ip-1min";q=2;w=60, "ip-concurrent";q=1;qu="concurrent-requests"`
	res, p := fetch(t, srv.URL)
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "1" || res.Header.Get("RateLimit-Policy") != policy ||
		res.Header.Get("RateLimit") != `"ip-concurrent";r=0` || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "ip-concurrent" {
		t.Errorf("slot denial: %d, %v, %+v", res.StatusCode, res.Header, p)
	}
	close(finish)
	if code := <-done; code != 200 {
		t.Fatalf("first request: %d", code)
	}
	redistest.Eventually(t, "slot released", func() bool { return used(peek(), "concurrent") == 0 })
	if d := peek(); d.Blocked || used(d, "1min") != 1 {
		t.Fatalf("after a slot denial: blocked %v, used %d of the minute, want no block and 1", d.Blocked, used(d, "1min"))
	}
	if res, _ := fetch(t, srv.URL); res.StatusCode != 200 {
		t.Fatalf("second admission: %d", res.StatusCode)
	}
	redistest.Eventually(t, "slot released", func() bool { return used(peek(), "concurrent") == 0 })
	// The third request in the minute is denied by the rate window and
	// starts the block; so is every later one, with the block's time left.
	for i := 0; i < 2; i++ {
		res, p := fetch(t, srv.URL)
		retry, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		if res.StatusCode != 429 || retry < 290 || retry > 300 || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "ip-1min" ||
			res.Header.Get("RateLimit") != `"ip-1min";r=0;t=`+res.Header.Get("Retry-After") ||
			res.Header.Get("RateLimit-Policy") != policy {
			t.Errorf("denial %d in the block: %d, %v, %+v", i, res.StatusCode, res.Header, p)
		}
	}
	if d := peek(); !d.Blocked || used(d, "concurrent") != 0 {
		t.Errorf("after the block: blocked %v, slots used %d; want blocked, no slot", d.Blocked, used(d, "concurrent"))
	}
}

// TestComboPanicCountSlot: a handler that panics in a group with count:
// and an in-flight window stays counted (its outcome is unknown) and
// releases its slot; a non-counted status is given back and releases its
// slot once.
func TestComboPanicCountSlot(t *testing.T) {
	t.Parallel()
	srv, peek := comboServer(t, "ip:10/min,1 concurrent; count:2xx", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("do") {
		case "panic":
			panic(http.ErrAbortHandler)
		case "fail":
			w.WriteHeader(500)
		}
	})
	if res, err := http.Get(srv.URL + "?do=panic"); err == nil {
		res.Body.Close()
		t.Fatalf("panicking handler answered %d", res.StatusCode)
	}
	redistest.Eventually(t, "slot released after panic", func() bool { return used(peek(), "concurrent") == 0 })
	if n := used(peek(), "1min"); n != 1 {
		t.Errorf("after panic: minute used %d, want 1 (stays counted)", n)
	}
	res, _ := fetch(t, srv.URL+"?do=fail")
	if res.StatusCode != 500 {
		t.Fatalf("failing handler: %d", res.StatusCode)
	}
	redistest.Eventually(t, "500 given back and released", func() bool {
		d := peek()
		return used(d, "concurrent") == 0 && used(d, "1min") == 1
	})
	res, _ = fetch(t, srv.URL)
	if res.StatusCode != 200 || res.Header.Values("RateLimit")[0] != `"ip-1min";r=8;t=60` {
		t.Errorf("after panic and 500: %d, RateLimit %q", res.StatusCode, res.Header.Values("RateLimit"))
	}
	redistest.Eventually(t, "all released", func() bool { d := peek(); return used(d, "concurrent") == 0 && used(d, "1min") == 2 })
}

// TestComboSettleSlotCount: one route with a settled bytes rule, an
// in-flight window and count:2xx. A download the client abandons releases
// its slot and counts what was written instead of the estimate; a 500 is
// given back whole (slot and estimate), not settled.
func TestComboSettleSlotCount(t *testing.T) {
	t.Parallel()
	const estimate, sent = 512 << 10, 100 << 10
	wrote := make(chan struct{}, 1)
	srv, peek := comboServer(t, "ip[bytes]:1Mi/min; ip:1 concurrent; count:2xx", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("do") {
		case "abort":
			w.Write(make([]byte, sent))
			w.(http.Flusher).Flush()
			wrote <- struct{}{}
			<-r.Context().Done() // until the client hangs up
		case "fail":
			w.WriteHeader(500)
			w.Write(make([]byte, 10))
		}
	},
		middleware.WithCostFunc("bytes", func(*http.Request) (int64, error) { return estimate, nil }),
		middleware.WithSettle("bytes", middleware.Settlement{Written: true}))
	bytesUsed := func() int64 { return used(peek(), "1min") }

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"?do=abort", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-wrote
	if n := used(peek(), "concurrent"); n != 1 || bytesUsed() != estimate {
		t.Errorf("while downloading: slots %d, bytes %d; want 1, %d", n, bytesUsed(), estimate)
	}
	cancel()
	res.Body.Close()
	redistest.Eventually(t, "abandoned download settled and released", func() bool {
		d := peek()
		return used(d, "concurrent") == 0 && used(d, "1min") == sent
	})

	res, _ = fetch(t, srv.URL+"?do=fail")
	if res.StatusCode != 500 {
		t.Fatalf("failing handler: %d", res.StatusCode)
	}
	redistest.Eventually(t, "500 given back and released", func() bool {
		d := peek()
		return used(d, "concurrent") == 0 && used(d, "1min") == sent
	})
	// Settled to 0 bytes: a 2xx with an empty body.
	res, _ = fetch(t, srv.URL)
	if want := `"ip[bytes]-1min";r=` + strconv.Itoa(1<<20-sent-estimate) + `;t=60`; res.StatusCode != 200 || !contains(res.Header.Values("RateLimit"), want) {
		t.Errorf("after: %d, RateLimit %q, want an item %s", res.StatusCode, res.Header.Values("RateLimit"), want)
	}
	redistest.Eventually(t, "empty body settled to 0", func() bool {
		d := peek()
		return used(d, "concurrent") == 0 && used(d, "1min") == sent
	})
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestComboShadowSlotBlock: a shadow group with an in-flight window and a
// block never refuses and sends no rate-limit fields; requests over the
// slot run without holding one, and once every handler has ended no slot
// is held.
func TestComboShadowSlotBlock(t *testing.T) {
	t.Parallel()
	const n = 4
	entered, finish := make(chan struct{}, n), make(chan struct{})
	var admitted atomic.Int64
	srv, peek := comboServer(t, "ip:2/min,1 concurrent; block:1m; mode:shadow", func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-finish
		w.Write([]byte("ok"))
	}, middleware.WithHook(func(ev middleware.Event) {
		if ev.Allowed {
			admitted.Add(1)
		}
	}))
	codes := make(chan *http.Response, n)
	for i := 0; i < n; i++ {
		go func() {
			res, err := http.Get(srv.URL)
			if err != nil {
				t.Error(err)
				codes <- nil
				return
			}
			res.Body.Close()
			codes <- res
		}()
	}
	for i := 0; i < n; i++ {
		waitEntered(t, entered)
	}
	if d := peek(); used(d, "concurrent") != 1 {
		t.Errorf("%d shadow requests running: %d slots held, want 1 (the one admitted)", n, used(d, "concurrent"))
	}
	close(finish)
	for i := 0; i < n; i++ {
		res := <-codes
		if res == nil {
			continue
		}
		if res.StatusCode != 200 || res.Header.Get("RateLimit") != "" || res.Header.Get("RateLimit-Policy") != "" || res.Header.Get("Retry-After") != "" {
			t.Errorf("shadow response: %d, %v", res.StatusCode, res.Header)
		}
	}
	if a := admitted.Load(); a != 1 {
		t.Errorf("the engine admitted %d of %d concurrent shadow requests, want 1", a, n)
	}
	redistest.Eventually(t, "no slot held once every handler ended", func() bool { return used(peek(), "concurrent") == 0 })
	// Over the rate window: served all the same, and no block starts (it
	// would refuse the client at once were the group switched to enforce).
	for i := 0; i < 3; i++ {
		if res, _ := fetch(t, srv.URL); res.StatusCode != 200 {
			t.Errorf("shadow request over the limit: %d", res.StatusCode)
		}
	}
	if d := peek(); d.Blocked {
		t.Errorf("shadow mode started a block: %+v", d)
	}
	redistest.Eventually(t, "no slot held", func() bool { return used(peek(), "concurrent") == 0 })
}

// TestComboExempt: an exempt role takes no slot, is not blocked, is not
// settled and gets no settlement context, while the group's other callers
// are limited, blocked and settled.
func TestComboExempt(t *testing.T) {
	t.Parallel()
	const n = 3
	entered, finish := make(chan struct{}, n), make(chan struct{})
	var reported atomic.Int64
	srv, peek := comboServer(t, "ip[bytes]:1Ki/min; ip:1/min,1 concurrent; block:1m; count:2xx; exempt:admin", func(w http.ResponseWriter, r *http.Request) {
		if middleware.ReportCost(r.Context(), "bytes", 7) {
			reported.Add(1)
		}
		if r.URL.Query().Get("hold") != "" {
			entered <- struct{}{}
			<-finish
		}
		w.Write([]byte("ok"))
	},
		middleware.WithCostFunc("bytes", func(*http.Request) (int64, error) { return 100, nil }),
		middleware.WithSettle("bytes", middleware.Settlement{Written: true}))
	get := func(target, ro string) *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+target, nil)
		if ro != "" {
			req.Header.Set("X-Test-Role", ro)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return nil
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	// Admins running at once hold no slot.
	codes := make(chan int, n)
	for i := 0; i < n; i++ {
		go func() {
			if res := get("?hold=1", "admin"); res != nil {
				codes <- res.StatusCode
				return
			}
			codes <- 0
		}()
	}
	for i := 0; i < n; i++ {
		waitEntered(t, entered)
	}
	if d := peek(); used(d, "concurrent") != 0 || used(d, "1min") != 0 {
		t.Errorf("%d admins running: slots %d, bytes %d; want none", n, used(d, "concurrent"), used(d, "1min"))
	}
	close(finish)
	for i := 0; i < n; i++ {
		if c := <-codes; c != 200 {
			t.Errorf("admin: %d", c)
		}
	}
	if r := reported.Load(); r != 0 {
		t.Errorf("ReportCost accepted in %d exempt requests, want 0", r)
	}
	// The same address without the role: admitted (and settled), then
	// denied, which blocks the address.
	if res := get("", ""); res == nil || res.StatusCode != 200 {
		t.Fatal("first user request not admitted")
	}
	for i := 0; i < 2; i++ {
		if res := get("", ""); res != nil && res.StatusCode != 429 {
			t.Errorf("user request over the limit: %d", res.StatusCode)
		}
	}
	redistest.Eventually(t, "user blocked, settled to 7 bytes, no slot", func() bool {
		d := peek()
		return d.Blocked && used(d, "concurrent") == 0 && used(d, "1min") == 7
	})
	if res := get("", "admin"); res == nil || res.StatusCode != 200 || res.Header.Get("RateLimit") != "" {
		t.Errorf("admin from a blocked address: %v", res)
	}
	if d := peek(); used(d, "1min") != 7 || used(d, "concurrent") != 0 {
		t.Errorf("after an admin request: bytes %d, slots %d; want 7, 0", used(d, "1min"), used(d, "concurrent"))
	}
}

// waitEntered waits for a handler to signal on entered, failing the test
// rather than hanging when none does.
func waitEntered(t *testing.T, entered <-chan struct{}) {
	t.Helper()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no handler entered within 10s")
	}
}

// TestComboGiveBackReleases: a request of a group with count: and an
// in-flight window whose status is not counted is given back, which frees
// its slot too, with one finish op after the decision; a counted one is
// released with one. The finish is queued (engine.Engine.FinishAsync): it
// rides the next decision's script call, or goes on its own within
// 1 ms, so a request's handling holds its decision's round
// trip and at most a previous request's finish, and the finishes take at
// most one round trip each in all.
func TestComboGiveBackReleases(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	client := s.Client()
	hook := &redistest.RoundTripCounter{}
	client.AddHook(hook)
	e := testutil.NewEngine(t, client)
	mw, err := middleware.New(rules.MustParse("ip:10/min,1 concurrent; count:2xx"), e, middleware.WithScope("s"))
	if err != nil {
		t.Fatal(err)
	}
	inner := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("do") == "fail" {
			w.WriteHeader(500)
		}
	}))
	// The steps after the handler run before inner returns: the count is
	// exact.
	cmds := make(chan int64, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c0 := hook.Count()
		inner.ServeHTTP(w, r)
		cmds <- hook.Count() - c0
	}))
	t.Cleanup(srv.Close)
	for _, warm := range []string{"/", "/?do=fail"} { // loads the scripts
		fetch(t, srv.URL+warm)
		<-cmds
	}
	// The warm-ups' finishes are sent once Redis holds what they did: no
	// slot, one request counted (the failed one was given back).
	ipCheck := engine.Request{Scope: "s", Checks: []engine.Check{{
		Rule: rules.MustParse("ip:10/min,1 concurrent").Rules[0], Subject: "ip:127.0.0.1"}}}
	redistest.Eventually(t, "the warm-ups' finishes", func() bool {
		d, err := enginePeek(e, context.Background(), ipCheck)
		return err == nil && used(d, "concurrent") == 0 && used(d, "1min") == 1
	})
	start := hook.Count()
	for _, tc := range []struct {
		target string
		status int
	}{{"/", 200}, {"/?do=fail", 500}, {"/", 200}} {
		if res, _ := fetch(t, srv.URL+tc.target); res.StatusCode != tc.status {
			t.Fatalf("%s: %d, want %d", tc.target, res.StatusCode, tc.status)
		}
		// The decision, carrying the previous request's finish or after
		// it was sent on its own (which may happen during this request).
		if n := <-cmds; n < 1 || n > 2 {
			t.Errorf("%s: %d Redis round trips, want the decision and at most a finish sent alone", tc.target, n)
		}
	}
	// The Peek carries the last finish if it is still queued.
	d, err := enginePeek(e, context.Background(), ipCheck)
	if err != nil || used(d, "concurrent") != 0 || used(d, "1min") != 3 {
		t.Errorf("after: slots %d, minute %d (%v); want 0, 3 (3 of 5 counted)", used(d, "concurrent"), used(d, "1min"), err)
	}
	// 3 decisions, 3 finishes of one op each (a give-back and a release
	// apart would take 3 more), and the Peek.
	if n := hook.Count() - start; n > 7 {
		t.Errorf("%d Redis round trips in all, want at most 7", n)
	}
}
