package slidelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// TestEmbeddedSlowLogin is issue 38's hole 7 through the public API: a
// Limiter with its defaults (100 ms timeout, fail:local) on a miniredis of
// this process, as the demo runs. The fifth failed login meets the store
// held for 300 ms (a loaded machine): it must wait for the store, not be
// counted by the fallback alone, so that the sixth is refused. Before the
// fix the fifth went to the fallback and the sixth passed
// key(account):5/min; count:401 (the fifth was not in the store: its call
// was undone there, and the store decided the sixth).
func TestEmbeddedSlowLogin(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rc.Close() })
	lim, err := slidelimit.New(rc, slidelimit.WithKeyFunc("account", func(r *http.Request) string { return r.PostFormValue("account") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	mux := http.NewServeMux()
	err = lim.Handle(mux, "POST /login", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "wrong password", http.StatusUnauthorized)
	}), "key(account):5/min; count:401")
	if err != nil {
		t.Fatal(err)
	}
	login := func() int {
		form := url.Values{"account": {"bob"}, "password": {"guess"}}
		r := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w.Code
	}
	for i := range 6 {
		if i == 4 {
			m.Lock()
			go func() {
				time.Sleep(300 * time.Millisecond)
				m.Unlock()
			}()
		}
		want := http.StatusUnauthorized
		if i == 5 {
			want = http.StatusTooManyRequests
			// The store answers again (the fallback's decisions stop
			// once a background probe finds it answering): the sixth is
			// decided by the store, with what the fifth left there.
			waitForStore(t, engineOf(lim))
		}
		if got := login(); got != want {
			t.Fatalf("failed login %d: %d, want %d", i+1, got, want)
		}
	}
}

// waitForStore waits until e decides from its store again.
func waitForStore(t *testing.T, e *engine.Engine) {
	t.Helper()
	r := engine.Request{Scope: "probe", Checks: []engine.Check{{Subject: "p",
		Rule: rules.Rule{Kind: rules.User, Windows: []rules.Window{{Limit: 1, Period: time.Minute}}}}}}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d, err := enginePeek(e, context.Background(), r)
		if err == nil && d.Source == "redis" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision from the store 10 s after its pause: %v, %v", d.Source, err)
		}
	}
}
