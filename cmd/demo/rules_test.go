package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/testutil"
)

// TestAdminRules runs the tour step (docs/tour.md): two demo processes on one
// Redis; the super-admin tightens GET /health on one and the other
// enforces it; bad text is refused with its position; DELETE restores.
func TestAdminRules(t *testing.T) {
	t.Parallel()
	b, err := openBackend(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	var tds [2]*testDemo
	for i := range tds {
		log := &testutil.LogBuffer{}
		d, err := newServer(b, slog.New(slog.NewTextHandler(log, nil)), testTimeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.lim.Close() })
		tds[i] = &testDemo{t: t, d: d, log: log}
	}
	one, two := tds[0], tds[1]
	put := func(td *testDemo, scope, body, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("PUT", "/admin/rules?scope="+strings.ReplaceAll(scope, " ", "%20"), strings.NewReader(body))
		r.RemoteAddr = peer
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		td.d.handler.ServeHTTP(w, r)
		return w
	}

	if w := put(one, "GET /health", "ip:1/min", "alice"); w.Code != http.StatusForbidden {
		t.Errorf("alice PUT: %d", w.Code)
	}
	if w := put(one, "GET /health", "ip:0/min", "root"); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "limit 0 is below 1 at offset 3") {
		t.Errorf("bad text: %d %s", w.Code, w.Body)
	}
	// Every mistake in the text, whichever package finds it, is the
	// caller's: 400 with the reason, never a 503 for the store.
	for body, want := range map[string]string{
		"key(nokey):1/s":            "key(nokey)",
		"ip:1/s; scope:other":       "scope:other",
		"ip:1/s; role(admn)=ip:2/s": "is not declared",
		"user[nocost]:1/s":          "nocost",
	} {
		if w := put(one, "GET /health", body, "root"); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), want) {
			t.Errorf("PUT %q: %d %s, want 400 naming %s", body, w.Code, w.Body, want)
		}
	}
	if w := put(one, "GET /health", "ip:2/min", "root"); w.Code != http.StatusOK {
		t.Fatalf("root PUT: %d %s", w.Code, w.Body)
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	for two.do("GET", "/health", "", "192.0.2.50:1").Code != http.StatusTooManyRequests {
		if time.Now().After(deadline) {
			t.Fatal("the other process did not enforce the override within 1.5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// An empty body is a mistake, not a way to clear (SetRules would).
	if w := put(one, "GET /health", "", "root"); w.Code != http.StatusBadRequest {
		t.Errorf("empty PUT: %d %s, want 400", w.Code, w.Body)
	}
	if w := one.do("GET", "/admin/rules", "root", peer); w.Code != http.StatusOK || !strings.HasPrefix(w.Body.String(), `{"version":`) ||
		!strings.Contains(w.Body.String(), `"overrides":[{"scope":"GET /health","rules":"ip:2/min"}]}`) {
		t.Errorf("GET /admin/rules: %d %s", w.Code, w.Body)
	}
	r := httptest.NewRequest("DELETE", "/admin/rules?scope=GET%20/health", nil)
	r.RemoteAddr = peer
	r.Header.Set("Authorization", "Bearer root")
	w := httptest.NewRecorder()
	two.d.handler.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", w.Code, w.Body)
	}
	deadline = time.Now().Add(1500 * time.Millisecond)
	for one.do("GET", "/health", "", "192.0.2.50:1").Code != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("the code's rules did not come back within 1.5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
