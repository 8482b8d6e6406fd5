package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/testutil"
)

// testDemo is the demo's handler tree on a backend, called directly so
// that every request can come from a chosen peer address.
type testDemo struct {
	t   *testing.T
	d   *demo
	log *testutil.LogBuffer
}

// newTestDemo builds the demo on an embedded miniredis, or on the Redis at
// redisURL.
func newTestDemo(t *testing.T, redisURL string) *testDemo {
	t.Helper()
	b, err := openBackend(context.Background(), redisURL, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	log := &testutil.LogBuffer{}
	d, err := newServer(b, slog.New(slog.NewTextHandler(log, nil)), testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.lim.Close() })
	return &testDemo{t: t, d: d, log: log}
}

// do sends one request as the account token ("" for anonymous) from the
// peer address remote.
func (td *testDemo) do(method, target, token, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r.RemoteAddr = remote
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	td.d.handler.ServeHTTP(w, r)
	return w
}

// codes sends n requests and returns their statuses.
func (td *testDemo) codes(n int, method string, target func(i int) string, token, remote string) []int {
	var c []int
	for i := range n {
		c = append(c, td.do(method, target(i), token, remote).Code)
	}
	return c
}

func path(p string) func(int) string { return func(int) string { return p } }

// distinctFiles names a different file per request, /files/NAME0,
// /files/NAME1, ...: downloads count distinct files (distinct:path).
func distinctFiles(name string) func(int) string {
	return func(i int) string { return fmt.Sprintf("/files/%s%d", name, i) }
}

// repeat returns n copies of code followed by the codes in then.
func repeat(code, n int, then ...int) []int {
	return append(slices.Repeat([]int{code}, n), then...)
}

func wantCodes(t *testing.T, what string, got, want []int) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s: codes\n got %v\nwant %v", what, got, want)
	}
}

const peer = "192.0.2.1:4000"

func TestHealthLimited(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	checkHealth(t, td)
}

// checkHealth sends six quick requests to GET /health (ip:5/s,100/min).
func checkHealth(t *testing.T, td *testDemo) {
	t.Helper()
	var last *httptest.ResponseRecorder
	var got []int
	for range 6 {
		last = td.do("GET", "/health", "", peer)
		got = append(got, last.Code)
	}
	wantCodes(t, "six quick /health", got, repeat(200, 5, 429))
	h := last.Header()
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || ra > 1 {
		t.Errorf("Retry-After = %q, want 1 (the 5/s window)", h.Get("Retry-After"))
	}
	if p := h.Get("RateLimit-Policy"); p != `"ip-1s";q=5;w=1, "ip-1min";q=100;w=60` {
		t.Errorf("RateLimit-Policy = %q", p)
	}
	if rl := h.Get("RateLimit"); !regexp.MustCompile(`^"ip-1s";r=0;t=1$`).MatchString(rl) {
		t.Errorf("RateLimit = %q", rl)
	}
	if ct := h.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("429 Content-Type = %q", ct)
	}
	// Another client has its own windows.
	if c := td.do("GET", "/health", "", "192.0.2.99:1").Code; c != 200 {
		t.Errorf("another IP: %d, want 200", c)
	}
}

func TestSuperadminNeverLimited(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	var got []int
	for i := range 40 {
		w := td.do("GET", "/files/1", "root", peer)
		got = append(got, w.Code)
		if i == 0 && (w.Header().Get("RateLimit") != "" || w.Header().Get("RateLimit-Policy") != "") {
			t.Errorf("an exempt response carries rate-limit fields: %v", w.Header())
		}
	}
	wantCodes(t, "40 downloads by root", got, repeat(200, 40))
}

func TestUserDownloads(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	checkDownloads(t, td)
}

// checkDownloads has alice download files 1 to 11 (user:10/min, whichever
// file) and bob one file.
func checkDownloads(t *testing.T, td *testDemo) {
	t.Helper()
	got := td.codes(11, "GET", func(i int) string { return fmt.Sprintf("/files/%d", i+1) }, "alice", peer)
	wantCodes(t, "alice, files 1..11", got, repeat(200, 10, 429))
	if c := td.do("GET", "/files/1", "bob", peer).Code; c != 200 {
		t.Errorf("bob after alice is limited: %d, want 200", c)
	}
}

// TestDownloadBytes checks the byte quota of downloads: 1 GiB a day per
// user, counted by object size before the handler runs.
func TestDownloadBytes(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	for _, step := range []struct {
		path string
		code int
	}{
		{"/files/video", 200},   // 700 MiB of 1024
		{"/files/video", 429},   // 1400 MiB would be over the quota
		{"/files/1", 200},       // 10 MiB still fit
		{"/files/archive", 429}, // 3 GiB never fit in a day's quota
	} {
		w := td.do("GET", step.path, "bob", peer)
		if w.Code != step.code {
			t.Fatalf("bob GET %s: %d %s, want %d", step.path, w.Code, w.Body, step.code)
		}
		if step.code == 429 && !strings.Contains(w.Body.String(), "user[bytes]-1d") {
			t.Errorf("bob GET %s: 429 body %s does not name the byte quota", step.path, w.Body)
		}
		// Only a request that can fit later is told when to retry.
		if never := step.path == "/files/archive"; never != (w.Header().Get("Retry-After") == "") && step.code == 429 {
			t.Errorf("bob GET %s: Retry-After %q", step.path, w.Header().Get("Retry-After"))
		}
		t.Logf("GET %s: %d RateLimit %q Retry-After %q %s", step.path, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"), w.Body)
	}
}

func TestAdminCountedByIP(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	a, b := "192.0.2.10:1000", "192.0.2.11:1000"
	wantCodes(t, "admin from A", td.codes(31, "GET", func(i int) string { return fmt.Sprintf("/files/%d", i) }, "admin", a), repeat(200, 30, 429))
	wantCodes(t, "admin from B", td.codes(30, "GET", distinctFiles("b"), "admin", b), repeat(200, 30))
	wantCodes(t, "admin from A again, another port", td.codes(1, "GET", path("/files/new"), "admin", "192.0.2.10:2000"), []int{429})
	// The admin account is not counted as a user: bob, from another IP, is
	// unaffected.
	wantCodes(t, "bob", td.codes(1, "GET", path("/files/1"), "bob", "192.0.2.12:1"), []int{200})
}

func TestDeleteUser(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	wantCodes(t, "alice", td.codes(3, "DELETE", path("/users/1"), "alice", peer), repeat(403, 3))
	wantCodes(t, "anonymous", td.codes(1, "DELETE", path("/users/1"), "", peer), []int{403})
	wantCodes(t, "admin", td.codes(6, "DELETE", func(i int) string { return fmt.Sprintf("/users/%d", i) }, "admin", peer), repeat(200, 5, 429))
	wantCodes(t, "admin from another IP", td.codes(1, "DELETE", path("/users/1"), "admin", "192.0.2.77:1"), []int{200})
	wantCodes(t, "root", td.codes(20, "DELETE", path("/users/1"), "root", peer), repeat(200, 20))
}

// limitsURL is the admin endpoint's URL for scope, kind and the other
// query parameters, given as name, value pairs.
func limitsURL(scope, kind string, kv ...string) string {
	q := url.Values{"scope": {scope}, "kind": {kind}}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return "/admin/limits?" + q.Encode()
}

type peekResponse struct {
	Scope   string       `json:"scope"`
	Kind    string       `json:"kind"`
	Subject string       `json:"subject"`
	IP      string       `json:"ip"`
	Allowed bool         `json:"allowed"`
	Windows []windowView `json:"windows"`
	Error   string       `json:"error"`
}

func (td *testDemo) peek(token, target string) (int, peekResponse) {
	td.t.Helper()
	w := td.do("GET", target, token, peer)
	var p peekResponse
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil && w.Code != http.StatusForbidden {
		td.t.Fatalf("GET %s: %d %q: %v", target, w.Code, w.Body, err)
	}
	return w.Code, p
}

// used returns "policy=used/limit" per window.
func used(p peekResponse) []string {
	var s []string
	for _, w := range p.Windows {
		s = append(s, fmt.Sprintf("%s=%d/%d", w.Policy, w.Used, w.Limit))
	}
	return s
}

const files = "GET /files/{id}"

func TestAdminLimits(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	checkAdminLimits(t, td)
}

func checkAdminLimits(t *testing.T, td *testDemo) {
	t.Helper()
	aliceURL := limitsURL(files, "user", "subject", "alice")
	wantCodes(t, "alice downloads 3", td.codes(3, "GET", distinctFiles("a"), "alice", peer), repeat(200, 3))

	code, p1 := td.peek("root", aliceURL)
	if code != 200 {
		t.Fatalf("peek: %d %+v", code, p1)
	}
	if got, want := used(p1), []string{"user-concurrent=0/2", "user-1min=3/10", "user-1d=3/200"}; !slices.Equal(got, want) {
		t.Errorf("alice's windows = %q, want %q", got, want)
	}
	w := p1.Windows[1]
	if w.Period != 60 || w.Remaining != 7 || w.Reset <= 0 || w.Reset > 60 || !p1.Allowed || p1.Subject != "alice" {
		t.Errorf("peek = %+v", p1)
	}
	_, p2 := td.peek("root", aliceURL)
	if !slices.Equal(used(p1), used(p2)) {
		t.Errorf("peeking counted: %q then %q", used(p1), used(p2))
	}

	wantCodes(t, "alice up to her limit", td.codes(8, "GET", distinctFiles("b"), "alice", peer), repeat(200, 7, 429))
	if _, p := td.peek("root", aliceURL); p.Allowed || !slices.Equal(used(p), []string{"user-concurrent=0/2", "user-1min=10/10", "user-1d=10/200"}) {
		t.Errorf("full: %+v", p)
	}
	if w := td.do("DELETE", aliceURL, "root", peer); w.Code != 200 || !strings.Contains(w.Body.String(), `"reset":true`) {
		t.Fatalf("reset: %d %s", w.Code, w.Body)
	}
	if _, p := td.peek("root", aliceURL); !slices.Equal(used(p), []string{"user-concurrent=0/2", "user-1min=0/10", "user-1d=0/200"}) {
		t.Errorf("after reset: %q", used(p))
	}
	wantCodes(t, "alice after reset", td.codes(1, "GET", path("/files/9"), "alice", peer), []int{200})
	if !strings.Contains(td.log.String(), `msg="windows reset" by=root scope="GET /files/{id}" kind=user subject=alice`) {
		t.Errorf("reset not logged:\n%s", td.log)
	}

	// The IP the downloads came from, through the ip rule, and an
	// anonymous download counted by IP in the user rule.
	if _, p := td.peek("root", limitsURL(files, "ip", "subject", "::ffff:192.0.2.1")); !slices.Equal(used(p), []string{"ip-1min=11/30"}) {
		t.Errorf("ip windows: %+v", p)
	}
	td.do("GET", "/files/1", "", "192.0.2.50:1")
	if _, p := td.peek("root", limitsURL(files, "user", "ip", "192.0.2.50")); !slices.Equal(used(p), []string{"user-concurrent=0/2", "user-1min=1/10", "user-1d=1/200"}) || p.IP != "192.0.2.50" {
		t.Errorf("user windows by IP: %+v", p)
	}
	byIP := limitsURL(files, "user", "ip", "192.0.2.50")
	if w := td.do("DELETE", byIP, "root", peer); w.Code != 200 {
		t.Errorf("reset by IP: %d %s", w.Code, w.Body)
	}
	if _, p := td.peek("root", byIP); !slices.Equal(used(p), []string{"user-concurrent=0/2", "user-1min=0/10", "user-1d=0/200"}) {
		t.Errorf("user windows by IP after reset: %+v", p)
	}
	if !strings.Contains(td.log.String(), `kind=user ip=192.0.2.50`) {
		t.Errorf("reset by IP not logged:\n%s", td.log)
	}

	for _, token := range []string{"", "alice", "admin"} {
		if c, _ := td.peek(token, aliceURL); c != 403 {
			t.Errorf("peek as %q: %d, want 403", token, c)
		}
		if c := td.do("DELETE", aliceURL, token, peer).Code; c != 403 {
			t.Errorf("reset as %q: %d, want 403", token, c)
		}
	}

	for _, tt := range []struct {
		target, msg string
	}{
		{limitsURL(files, "bogus", "subject", "alice"), `no limiter "bogus" in scope "GET /files/{id}"`},
		{limitsURL(files, "header(X-Api-Key)", "subject", "k"), `no limiter "header(X-Api-Key)"`},
		{limitsURL("/files/1", "user", "subject", "alice"), `unknown scope "/files/1": give a route pattern such as "GET /files/{id}"`},
		{limitsURL(files, "ip", "subject", "localhost"), `limiter "ip" never counts subject "localhost"`},
		{limitsURL(files, "user", "subject", ""), `limiter "user" never counts subject ""`},
		{limitsURL(files, "user", "ip", "alice"), `limiter "user" never counts by ip "alice": give an IP address`},
		{limitsURL("GET /health", "ip", "ip", "alice"), `limiter "ip" never counts by ip "alice"`},
		{limitsURL(files, "user", "subject", "alice", "ip", "192.0.2.1"), "give subject or ip, not both"},
		{limitsURL(files, ""), "scope and kind are required"},
		{"/admin/limits", "scope and kind are required"},
	} {
		for _, method := range []string{"GET", "DELETE"} {
			w := td.do(method, tt.target, "root", peer)
			var body struct{ Error string }
			err := json.Unmarshal(w.Body.Bytes(), &body)
			if w.Code != 400 || err != nil || !strings.Contains(body.Error, tt.msg) || strings.Contains(body.Error, "slidelimit:") {
				t.Errorf("%s %s: %d %s, want 400 with %q", method, tt.target, w.Code, w.Body, tt.msg)
			}
		}
	}
}

func TestUpload(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	wantCodes(t, "alice", td.codes(21, "POST", path("/pictures"), "alice", peer), repeat(201, 20, 429))
	wantCodes(t, "anonymous", td.codes(1, "POST", path("/pictures"), "", "192.0.2.8:1"), []int{401})
	wantCodes(t, "root", td.codes(25, "POST", path("/pictures"), "root", peer), repeat(201, 25))
}

// TestRealRedis runs the scenarios against a redis-server through -redis.
func TestRealRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for name, check := range map[string]func(*testing.T, *testDemo){
		"health": checkHealth, "downloads": checkDownloads, "admin limits": checkAdminLimits,
	} {
		t.Run(name, func(t *testing.T) {
			// Each scenario gets its own database: they count the same IPs.
			db := map[string]string{"health": "1", "downloads": "2", "admin limits": "3"}[name]
			check(t, newTestDemo(t, "redis://"+srv.Addr+"/"+db))
		})
	}
}

// TestLoadAgainstDemo runs the load subcommand against the demo for two
// seconds at 20 requests a second on /health (ip:5/s,100/min). Only what
// the windows guarantee is asserted: every request counted as answered was
// admitted within the two seconds, and no two-second span admits more than
// ten.
func TestLoadAgainstDemo(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	srv := httptest.NewServer(td.d.handler)
	t.Cleanup(srv.Close)
	var out bytes.Buffer
	code := run(context.Background(), []string{"load", "-url", srv.URL, "-path", "/health", "-rps", "20", "-duration", "2s"}, &out, io.Discard)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, &out)
	}
	m := regexp.MustCompile(`summary: sent (\d+), 200: (\d+), 429: (\d+), other: (\d+), retry-after (\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no summary in:\n%s", &out)
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	if ok := n(2); ok < 5 || ok > 10 {
		t.Errorf("200s = %d, want 5 to 10\n%s", ok, &out)
	}
	if n(3) == 0 || n(4) != 0 || m[5] != "1s..1s" {
		t.Errorf("want 429s with Retry-After 1 and nothing else\n%s", &out)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		var sec, sent, ok, limited, other int
		if _, err := fmt.Sscanf(line, "%d %d %d %d %d", &sec, &sent, &ok, &limited, &other); err == nil && ok > 10 {
			t.Errorf("second %d: %d admitted", sec, ok)
		}
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"-h"}, 0, []string{"demo load [-url U]", "GET /files/{id}        user:10/min,200/d,2 concurrent; user[bytes]:1073741824/d~15min,107374182400/calendar month; ip:30/min", "-cluster string", "-redis string", "-addr string"}},
		{[]string{"load", "-h"}, 0, []string{"Usage: demo load [flags]", "-rps int", "-token string"}},
		{[]string{"-bogus"}, 2, []string{"flag provided but not defined: -bogus", "Usage:"}},
		{[]string{"serve"}, 2, []string{`demo: unknown argument "serve"`}},
		{[]string{"load", "-rps", "0"}, 2, []string{"load: -rps must be at least 1"}},
		{[]string{"-redis", "redis://127.0.0.1:1", "-cluster", "127.0.0.1:2"}, 1, []string{"use either -redis or -cluster, not both"}},
		{[]string{"-redis", "http://x"}, 1, []string{"-redis: not a redis:// or rediss:// URL"}},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tt.args, &stdout, &stderr)
		all := stdout.String() + stderr.String()
		if code != tt.code {
			t.Errorf("%q: exit %d, want %d\n%s", tt.args, code, tt.code, all)
		}
		for _, w := range tt.want {
			if !strings.Contains(all, w) {
				t.Errorf("%q: output lacks %q:\n%s", tt.args, w, all)
			}
		}
	}
}

// TestServeShutsDown starts the real server on a free port, makes a
// request, and cancels: serve must stop gracefully and log what it used.
func TestServeShutsDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := &testutil.LogBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0"}, io.Discard, log) }()

	addr := regexp.MustCompile(`msg=listening addr=(http://\S+)`)
	var base string
	for deadline := time.Now().Add(10 * time.Second); base == ""; time.Sleep(10 * time.Millisecond) {
		if m := addr.FindStringSubmatch(log.String()); m != nil {
			base = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("server did not start:\n%s", log)
		}
	}
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") == "" {
		t.Errorf("GET /health: %d %v", resp.StatusCode, resp.Header)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d:\n%s", code, log)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not stop:\n%s", log)
	}
	for _, want := range []string{
		`msg=backend redis="embedded miniredis`,
		`msg=route pattern="GET /files/{id}" limit="user:10/min,200/d,2 concurrent; user[bytes]:1073741824/d~15min,107374182400/calendar month; ip:30/min; global:1000/h; role(admin)=ip:30/min; exempt:superadmin; calendar:Asia/Shanghai; distinct:path"`,
		`msg="shutting down"`, `msg=stopped`,
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestCluster runs scenarios against a 3-master Redis Cluster through
// -cluster.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	b, err := openBackend(context.Background(), "", strings.Join(c.Addrs(), ", "))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	if !strings.HasPrefix(b.desc, "Redis Cluster ") {
		t.Errorf("backend = %q", b.desc)
	}
	log := &testutil.LogBuffer{}
	d, err := newServer(b, slog.New(slog.NewTextHandler(log, nil)), testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.lim.Close() })
	td := &testDemo{t: t, d: d, log: log}
	checkHealth(t, td)
	checkDownloads(t, td)
	// The admin scenario starts from alice's first download.
	err = b.client.(*redis.ClusterClient).ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		return c.FlushAll(ctx).Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	// A FLUSHALL behind the engine's back is not announced to its cache of
	// denials: a new server starts without one.
	d, err = newServer(b, slog.New(slog.NewTextHandler(log, nil)), testTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.lim.Close() })
	checkAdminLimits(t, &testDemo{t: t, d: d, log: log})
}

// testTimeout keeps decisions on Redis when -race and parallel packages slow
// a healthy backend past the default 100 ms: a fail-mode decision would
// make the counts of these tests meaningless.
var testTimeout = slidelimit.WithTimeout(5 * time.Second)

// TestLogin checks login protection: successful logins are never limited,
// wrong passwords are stopped after five per account a minute.
func TestLogin(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	login := func(account, password string) int {
		form := url.Values{"account": {account}, "password": {password}}
		r := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = peer
		w := httptest.NewRecorder()
		td.d.handler.ServeHTTP(w, r)
		return w.Code
	}
	var ok []int
	for range 8 {
		ok = append(ok, login("alice", "alice-pw"))
	}
	wantCodes(t, "alice logs in 8 times", ok, repeat(200, 8))
	var wrong []int
	for range 7 {
		wrong = append(wrong, login("bob", "guess"))
	}
	wantCodes(t, "wrong passwords for bob", wrong, repeat(401, 5, 429, 429))
	wantCodes(t, "alice after bob's failures", []int{login("alice", "alice-pw")}, []int{200})
}

// TestStreamSettles aborts a streamed download of the 700 MiB video after
// 1 MiB through a real HTTP server: alice's byte quota then holds what the
// server sent, not the video's size.
func TestStreamSettles(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	done := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		td.d.handler.ServeHTTP(w, r) // settles before it returns
		done <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("GET", srv.URL+"/stream/video", nil)
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.ContentLength != 700<<20 {
		t.Fatalf("stream: %d, length %d", resp.StatusCode, resp.ContentLength)
	}
	if n, err := io.CopyN(io.Discard, resp.Body, 1<<20); n != 1<<20 {
		t.Fatalf("read %d: %v", n, err)
	}
	resp.Body.Close()
	<-done
	_, p := td.peek("root", "/admin/limits?scope=streams&kind=user%5Bbytes%5D&subject=alice")
	if len(p.Windows) != 1 {
		t.Fatalf("byte window of alice: %+v", p)
	}
	if u := p.Windows[0].Used; u < 1<<20 || u > 64<<20 {
		t.Errorf("after an aborted 700 MiB stream: %d bytes counted, want about 1 MiB (plus socket buffers)", u)
	}
}

// TestLoginBlock checks that an account that reached its limit of wrong
// passwords is blocked for 15 minutes: Retry-After says so.
func TestLoginBlock(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	var last *httptest.ResponseRecorder
	for range 7 {
		form := url.Values{"account": {"bob"}, "password": {"guess"}}
		r := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = peer
		last = httptest.NewRecorder()
		td.d.handler.ServeHTTP(last, r)
	}
	if last.Code != 429 || last.Header().Get("Retry-After") != "900" {
		t.Fatalf("7th wrong password: %d, Retry-After %q; want 429 for 900 s (block:15m)", last.Code, last.Header().Get("Retry-After"))
	}
}

// TestReports: a user runs one report at a time: while alice's first runs
// (its slot visible to the admin endpoint), her second is refused 429 with
// the in-flight policy and Retry-After 1, bob's runs, and once hers ends
// she may run another; root is exempt.
func TestReports(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	start := func(token string) (func() int, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequest("GET", "/reports/q3", nil).WithContext(ctx)
		r.RemoteAddr = peer
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		done := make(chan struct{})
		go func() { td.d.handler.ServeHTTP(w, r); close(done) }()
		return func() int { <-done; return w.Code }, cancel
	}
	aliceURL := limitsURL("GET /reports/{id}", "user", "subject", "alice")
	first, stop := start("alice")
	defer stop()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, p := td.peek("root", aliceURL); slices.Contains(used(p), "user-concurrent=1/1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("alice's first report holds no slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	w := td.do("GET", "/reports/q4", "alice", peer)
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" ||
		!strings.Contains(w.Header().Get("RateLimit-Policy"), `"user-concurrent";q=1;qu="concurrent-requests"`) ||
		!strings.Contains(w.Body.String(), `"violated-policies":["user-concurrent"]`) {
		t.Errorf("alice's second report: %d %v %s", w.Code, w.Header(), w.Body)
	}
	bob, stopBob := start("bob")
	root, stopRoot := start("root")
	root2, stopRoot2 := start("root")
	stop() // alice leaves: the work stops and her slot is released
	if code := first(); code != 200 {
		t.Errorf("alice's first report: %d", code)
	}
	again, stopAgain := start("alice")
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, p := td.peek("root", aliceURL); slices.Contains(used(p), "user-concurrent=1/1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("alice's next report holds no slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopBob()
	stopRoot()
	stopRoot2()
	stopAgain()
	for name, code := range map[string]int{"bob": bob(), "root": root(), "root again": root2(), "alice again": again()} {
		if code != 200 {
			t.Errorf("%s's report: %d, want 200", name, code)
		}
	}
	if _, p := td.peek("root", aliceURL); !slices.Equal(used(p), []string{"user-concurrent=0/1", "user-1h=2/20"}) {
		t.Errorf("alice's report windows at the end: %v", used(p))
	}
}

// TestAdminUI: the operator's page is for super-admins only, and names
// the user the demo just limited once the tallies are written.
func TestAdminUI(t *testing.T) {
	t.Parallel()
	td := newTestDemo(t, "")
	if c := td.do("GET", "/admin/ui/", "", peer).Code; c != 401 {
		t.Errorf("anonymous: %d, want 401", c)
	}
	if c := td.do("GET", "/admin/ui/", "admin", peer).Code; c != 403 {
		t.Errorf("admin: %d, want 403", c)
	}
	// A browser: challenged when anonymous or the password is wrong, let
	// in with a super-admin's name and password.
	basic := func(user, pw string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/admin/ui/", nil)
		r.RemoteAddr = peer
		if user != "" {
			r.SetBasicAuth(user, pw)
		}
		w := httptest.NewRecorder()
		td.d.handler.ServeHTTP(w, r)
		return w
	}
	for _, c := range []struct {
		user, pw  string
		code      int
		challenge bool
	}{
		{"", "", 401, true},
		{"root", "root-pw", 200, false},
		{"root", "wrong", 401, true},
		{"root", "", 401, true},
		{"nobody", "root-pw", 401, true},
		{"alice", "alice-pw", 403, false},
	} {
		w := basic(c.user, c.pw)
		got := w.Header().Get("WWW-Authenticate")
		if w.Code != c.code || (got != "") != c.challenge || c.challenge && !strings.HasPrefix(got, "Basic realm=") {
			t.Errorf("basic %s:%s: %d, WWW-Authenticate %q; want %d, challenge %v", c.user, c.pw, w.Code, got, c.code, c.challenge)
		}
	}
	if w := td.do("GET", "/admin/ui/", "root", peer); w.Code != 200 || w.Header().Get("WWW-Authenticate") != "" {
		t.Errorf("bearer root: %d %v, want 200 without a challenge", w.Code, w.Header())
	}
	td.codes(12, "GET", distinctFiles("ui"), "alice", peer) // distinct files: one file counts once
	var body string
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(100 * time.Millisecond) {
		w := td.do("GET", "/admin/ui/api/top?since=1m", "root", peer)
		if w.Code != 200 {
			t.Fatalf("top: %d %s", w.Code, w.Body)
		}
		if body = w.Body.String(); strings.Contains(body, `"subject":"alice","denied":2`) {
			break
		}
	}
	if !strings.Contains(body, `{"scope":"GET /files/{id}","limiter":"user","subject":"alice","denied":2}`) {
		t.Fatalf("top: %s", body)
	}
	w := td.do("GET", "/admin/ui/?subject=alice", "root", peer)
	if w.Code != 200 || !strings.Contains(w.Body.String(), "alice") || !strings.Contains(w.Body.String(), "GET /files/{id}") {
		t.Errorf("page: %d %s", w.Code, w.Body)
	}
}
