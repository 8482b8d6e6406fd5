package slidelimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestOverrideInflightLimitFunc: SetRules replaces a route's group that
// has an in-flight window with one that has more slots and a limit
// function. A request admitted under the old group, still running at the
// switch, holds its slot in the new group's window (same key) and
// releases it when it ends; the new group advertises its resolved limit;
// rule text naming an unregistered limit function is refused with nothing
// stored and the route's rules unchanged.
func TestOverrideInflightLimitFunc(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lim, err := slidelimit.New(redistest.Start(t).Client(),
		slidelimit.WithEngineOptions(engine.WithKeyPrefix(redistest.Prefix(t)), engine.WithTimeout(5*time.Second)),
		slidelimit.WithLimitFunc("quota", func(context.Context) (int64, error) { return 3, nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	const scope = "GET /dl"
	entered, finish := make(chan struct{}, 4), make(chan struct{})
	mux := http.NewServeMux()
	if err := lim.Handle(mux, scope, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") != "" {
			entered <- struct{}{}
			<-finish
		}
		w.Write([]byte("ok"))
	}), "ip:1 concurrent"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	slots := func() (n int64) {
		t.Helper()
		d, err := lim.Peek(ctx, scope, "ip", "127.0.0.1", false)
		if err != nil {
			t.Fatal(err)
		}
		for _, ws := range d.Windows {
			if ws.Window.Concurrent {
				n = max(n, ws.Used)
			}
		}
		return n
	}
	get := func(target string) *http.Response {
		res, err := http.Get(srv.URL + "/dl" + target)
		if err != nil {
			t.Error(err)
			return nil
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}

	// An unregistered limit function is refused before anything is stored.
	if err := lim.SetRules(ctx, scope, "ip:$nope/min,2 concurrent"); !isError(err, unregistered("WithLimitFunc")) {
		t.Errorf("SetRules naming $nope: %v, want an unregistered limit function", err)
	}
	if ov, err := rulesOf(ctx, lim); err != nil || len(ov.Overrides) != 0 || ov.Version != 0 {
		t.Errorf("after the refused SetRules: %+v, %v; want nothing stored", ov, err)
	}

	old := make(chan *http.Response, 1)
	go func() { old <- get("?hold=1") }()
	waitEntered(t, entered)
	if res := get(""); res == nil || res.StatusCode != 429 {
		t.Fatalf("second request beside one running under 1 concurrent: %v", res)
	}
	if err := lim.SetRules(ctx, scope, "ip:$quota/min,2 concurrent"); err != nil {
		t.Fatal(err)
	}
	// The old request's slot counts in the new window: one more fits.
	second := make(chan *http.Response, 1)
	go func() { second <- get("?hold=1") }()
	waitEntered(t, entered)
	res := get("")
	if res == nil || res.StatusCode != 429 ||
		res.Header.Get("RateLimit-Policy") != `"ip-1min";q=3;w=60, "ip-concurrent";q=2;qu="concurrent-requests"` {
		t.Fatalf("third request beside two running under 2 concurrent: %v", res)
	}
	if n := slots(); n != 2 {
		t.Errorf("slots held: %d, want 2", n)
	}
	close(finish)
	for _, ch := range []chan *http.Response{old, second} {
		if res := <-ch; res == nil || res.StatusCode != 200 {
			t.Errorf("held request: %v", res)
		}
	}
	redistest.Eventually(t, "both slots released", func() bool { return slots() == 0 })
	res = get("")
	if res == nil || res.StatusCode != 200 || res.Header.Get("RateLimit-Policy") != `"ip-1min";q=3;w=60, "ip-concurrent";q=2;qu="concurrent-requests"` {
		t.Errorf("after the switch: %v", res)
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
