package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// clockServer serves an OK handler behind group text (scope "s"), deciding
// with an engine on a real redis-server at the times of the returned clock
// (µs since 1970).
func clockServer(t *testing.T, text string, opts ...middleware.Option) (*httptest.Server, *redistest.Clock, *engine.Engine) {
	t.Helper()
	now := redistest.NewClock()
	now.SetTime(time.Now())
	e := testutil.NewEngine(t, redistest.Start(t).Client(), engine.WithClock(now.Now))
	mw, err := middleware.New(rules.MustParse(text), e, append([]middleware.Option{middleware.WithScope("s")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	t.Cleanup(srv.Close)
	return srv, now, e
}

// TestCalendarHeaders: a calendar month in Asia/Shanghai advertises its
// policy with w the longest month (31 days and an hour), t the seconds to
// the boundary, and a denial at 23:59:50 on the month's last day says
// Retry-After 10.
func TestCalendarHeaders(t *testing.T) {
	t.Parallel()
	srv, now, _ := clockServer(t, "ip:3/calendar month; calendar:Asia/Shanghai")
	sh, err := ruletime.LoadZone("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	get := func(at time.Time) *http.Response {
		t.Helper()
		now.SetTime(at)
		resp, err := http.Get(srv.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	const policy = `"ip-calendar-month";q=3;w=2682000`
	steps := []struct {
		at               time.Time
		status           int
		rateLimit, retry string
	}{
		{time.Date(2030, 1, 31, 22, 0, 0, 0, sh), 200, `"ip-calendar-month";r=2;t=7200`, ""},
		{time.Date(2030, 1, 31, 23, 0, 0, 0, sh), 200, `"ip-calendar-month";r=1;t=3600`, ""},
		{time.Date(2030, 1, 31, 23, 59, 0, 0, sh), 200, `"ip-calendar-month";r=0;t=60`, ""},
		{time.Date(2030, 1, 31, 23, 59, 50, 0, sh), 429, `"ip-calendar-month";r=0;t=10`, "10"},
		{time.Date(2030, 1, 31, 23, 59, 59, 500_000_000, sh), 429, `"ip-calendar-month";r=0;t=1`, "1"},
		{time.Date(2030, 2, 1, 0, 0, 0, 0, sh), 200, `"ip-calendar-month";r=2;t=2419200`, ""},
	}
	for i, s := range steps {
		resp := get(s.at)
		if resp.StatusCode != s.status || resp.Header.Get("RateLimit") != s.rateLimit ||
			resp.Header.Get("Retry-After") != s.retry || resp.Header.Get("RateLimit-Policy") != policy {
			t.Fatalf("step %d at %v: %d RateLimit %q Retry-After %q Policy %q; want %d %q %q %q", i, s.at, resp.StatusCode,
				resp.Header.Get("RateLimit"), resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit-Policy"),
				s.status, s.rateLimit, s.retry, policy)
		}
	}
}

// TestDistinctPath: with user:3/min; user[bytes]:100k/min; distinct:path,
// five requests for one path and two for others are admitted, a fourth
// path is refused, and the byte quota counts every admitted request.
func TestDistinctPath(t *testing.T) {
	t.Parallel()
	srv, _, e := clockServer(t, "user:3/min; user[bytes]:100k/min; distinct:path",
		middleware.WithCostFunc("bytes", func(*http.Request) (int64, error) { return 10_000, nil }))
	for i, p := range []string{"/f/a", "/f/a", "/f/a", "/f/b", "/f/a", "/f/c", "/f/a", "/f/d"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := 200
		if p == "/f/d" {
			want = 429
		}
		if resp.StatusCode != want {
			t.Fatalf("request %d for %s: %d, want %d", i, p, resp.StatusCode, want)
		}
		if p == "/f/a" && i == 2 && resp.Header.Get("RateLimit") != `"user-1min";r=2;t=60` {
			t.Errorf("third request for one path: RateLimit %q, want r=2: the path counted once", resp.Header.Get("RateLimit"))
		}
	}
	sub, err := subjectOf(rules.IP, "127.0.0.1") // no identity: the user rules count by IP
	if err != nil {
		t.Fatal(err)
	}
	g := rules.MustParse("user[bytes]:100k/min")
	d, err := enginePeek(e, context.Background(), engine.Request{Scope: "s", Checks: []engine.Check{{Rule: g.Rules[0], Subject: sub}}})
	if err != nil || d.Windows[0].Used != 70_000 {
		t.Fatalf("bytes used %d, %v; want 70000: every admitted request, not the refused one", d.Windows[0].Used, err)
	}
}

// TestDistinctStartup: a distinct: name without a key function fails New,
// naming it; a registered one counts its values.
func TestDistinctStartup(t *testing.T) {
	t.Parallel()
	_, err := middleware.New(rules.MustParse("ip:3/min; distinct:file"), newMem())
	if testutil.ConfigError(err, "unregistered", "WithKeyFunc") == nil || !strings.Contains(err.Error(), "distinct:file") {
		t.Fatalf("New: %v; want ErrUnknownKey naming distinct:file", err)
	}
	if _, err := middleware.New(rules.MustParse("ip:3/min; distinct:file"), newMem(),
		middleware.WithKeyFunc("file", func(r *http.Request) string { return r.URL.Query().Get("f") })); err != nil {
		t.Fatal(err)
	}
	bad := rules.Group{Rules: []rules.Rule{{Kind: rules.IP, Windows: []rules.Window{{Limit: 1, Calendar: ruletime.Day}}}}, Calendar: "Mars/Olympus"}
	if _, err := middleware.New(bad, newMem()); err == nil || !strings.Contains(err.Error(), "Mars/Olympus") {
		t.Fatalf("New with an unknown zone: %v; want an error naming it", err)
	}
}

// TestCalendarItem: an admitted request's RateLimit lists the calendar
// window with its t beside the tightest window of each unit.
func TestCalendarItem(t *testing.T) {
	t.Parallel()
	srv, now, _ := clockServer(t, "user:10/min; user[bytes]:1Gi/d,100Gi/calendar month; calendar:Asia/Shanghai",
		middleware.WithCostFunc("bytes", func(*http.Request) (int64, error) { return 1 << 20, nil }))
	sh, err := ruletime.LoadZone("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	now.SetTime(time.Date(2030, 1, 31, 23, 0, 0, 0, sh))
	resp, err := http.Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := []string{`"user-1min";r=9;t=60`, `"user[bytes]-1d";r=1072693248;t=86400`, `"user[bytes]-calendar-month";r=107373133824;t=3600`}
	if got := resp.Header.Values("RateLimit"); !slices.Equal(got, want) {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
	if p := resp.Header.Get("RateLimit-Policy"); !strings.Contains(p, `"user[bytes]-calendar-month";q=107374182400;qu="content-bytes";w=2682000`) {
		t.Errorf("RateLimit-Policy %q lacks the calendar window", p)
	}
}

// enginePeek is the engine's Peek.
func enginePeek(e *engine.Engine, ctx context.Context, req engine.Request) (engine.Decision, error) {
	return e.Peek(ctx, req)
}
