package slidelimit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/admin"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// tallyService is one process limiting GET /files to 1 per user and
// minute, with the admin handler under /admin/ui/ for the role ops.
func tallyService(t *testing.T, c engine.Client, prefix string, opts ...slidelimit.Option) (*slidelimit.Limiter, *httptest.Server) {
	t.Helper()
	opts = append([]slidelimit.Option{slidelimit.WithEngineOptions(engine.WithKeyPrefix(prefix), engine.WithTimeout(5*time.Second))}, opts...)
	lim, err := slidelimit.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	mux := http.NewServeMux()
	if err := lim.Handle(mux, "GET /files", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), "user:1/min"); err != nil {
		t.Fatal(err)
	}
	mux.Handle("/admin/ui/", http.StripPrefix("/admin/ui", lim.AdminHandler("ops")))
	s := httptest.NewServer(asUser(mux))
	t.Cleanup(s.Close)
	return lim, s
}

// TestTallyFlushOption: the tally flush option sets the period of the
// writes and New refuses one out of bounds as an option's ConfigError; a
// Limiter with the tallies off counts
// none of its denials, not even on Close, and its page still shows the
// other processes' tallies.
func TestTallyFlushOption(t *testing.T) {
	t.Parallel()
	c := redistest.Start(t).Client()
	for _, d := range []time.Duration{time.Millisecond, 11 * time.Second} {
		if lim, err := slidelimit.New(c, withTallyFlush(d)); !isKind(err, "option") || !strings.Contains(err.Error(), "tally flush") {
			if lim != nil {
				lim.Close()
			}
			t.Errorf("tally flush %s: %v, want an option's ConfigError naming it", d, err)
		}
	}
	prefix := "t" + t.Name() + ":"
	_, on := tallyService(t, c, prefix, withTallyFlush(20*time.Millisecond))
	offLim, off := tallyService(t, c, prefix, withTallyFlush(0))
	for _, s := range []*httptest.Server{on, off} {
		for range 3 {
			call(t, "GET", s.URL+"/files", map[*httptest.Server]string{on: "alice", off: "bob"}[s], "", nil)
		}
	}
	top := func() string {
		res, body := call(t, "GET", off.URL+"/admin/ui/api/top?since=1m", "root", "ops", nil)
		var a admin.TopAnswer
		if err := json.Unmarshal([]byte(body), &a); res.StatusCode != 200 || err != nil {
			t.Fatalf("top: %d %s", res.StatusCode, body)
		}
		var s []string
		for _, d := range a.Top {
			s = append(s, d.Subject+":"+string(rune('0'+d.Denied)))
		}
		return strings.Join(s, " ")
	}
	// Until alice's second denial is written: a flush may come between
	// her two denials, and the page then reads alice:1 for a moment.
	got := ""
	for start := time.Now(); time.Since(start) < 15*time.Second && got != "alice:2"; time.Sleep(20 * time.Millisecond) {
		got = top()
	}
	offLim.Close() // would write bob's denials if it had counted them
	if got, again := got, top(); got != "alice:2" || again != "alice:2" {
		t.Errorf("top: %q, then %q after the Limiter without tallies closed; want alice:2", got, again)
	}
}

// TestCloseNoGoroutines: Close stops every goroutine a Limiter started,
// the denial tallies' writer among them. Not parallel: it counts the
// process's goroutines.
func TestCloseNoGoroutines(t *testing.T) {
	c := redistest.Start(t).Client()
	c.Ping(context.Background()) // let the client start what it starts
	before := runtime.NumGoroutine()
	lim, err := slidelimit.New(c, slidelimit.WithEngineOptions(engine.WithKeyPrefix("t"+t.Name()+":")))
	if err != nil {
		t.Fatal(err)
	}
	lim.Close()
	for i := 0; runtime.NumGoroutine() > before; i++ {
		if i == 100 {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
