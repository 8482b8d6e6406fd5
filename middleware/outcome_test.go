package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// countServer serves h behind middleware for group text on a real HTTP
// server, deciding with an engine on miniredis.
func countServer(t *testing.T, text string, h http.HandlerFunc) (*httptest.Server, *miniredis.Miniredis) {
	t.Helper()
	m, rc := redistest.Mini(t)
	e := testutil.NewEngine(t, rc)
	mw, err := middleware.New(rules.MustParse(text), e, middleware.WithScope("s"))
	if err != nil {
		t.Fatal(err)
	}
	withRoot := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Test-Root") != "" { // test-only authentication
				r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: "root", Roles: []role.Role{"root"}}))
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(withRoot(mw(h)))
	t.Cleanup(srv.Close)
	return srv, m
}

func get(t *testing.T, url string, root bool) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if root {
		req.Header.Set("X-Test-Root", "1")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestCountWriter checks, for a limit of 1 that counts only 401, that each
// optional interface of the ResponseWriter still works behind the status
// recorder, and which outcomes are given back: the second request is only
// admitted if the first was.
func TestCountWriter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler http.HandlerFunc
		body    string
		counted bool // the first request stays counted, so the second is denied
	}{
		{"ok", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }, "ok", false},
		{"nothing written", func(w http.ResponseWriter, r *http.Request) {}, "", false},
		{"listed status", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(401) }, "", true},
		{"other 4xx", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(403) }, "", false},
		{"informational first", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(401)
		}, "", true},
		{"flush", func(w http.ResponseWriter, r *http.Request) {
			f, ok := w.(http.Flusher)
			if !ok {
				t.Error("writer is not an http.Flusher")
				return
			}
			io.WriteString(w, "a")
			f.Flush()
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("ResponseController.Flush: %v", err)
			}
			io.WriteString(w, "b")
		}, "ab", false},
		{"read from", func(w http.ResponseWriter, r *http.Request) {
			if _, ok := w.(io.ReaderFrom); !ok {
				t.Error("writer is not an io.ReaderFrom")
			}
			if _, err := io.Copy(w, strings.NewReader("copied")); err != nil {
				t.Errorf("io.Copy: %v", err)
			}
		}, "copied", false},
		{"response controller", func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
				t.Errorf("SetWriteDeadline: %v", err)
			}
			if err := rc.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
				t.Errorf("SetReadDeadline: %v", err)
			}
			w.WriteHeader(401)
		}, "", true},
		{"hijack", func(w http.ResponseWriter, r *http.Request) {
			h, ok := w.(http.Hijacker)
			if !ok {
				t.Error("writer is not an http.Hijacker")
				return
			}
			conn, buf, err := h.Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			defer conn.Close()
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
			buf.Flush()
		}, "hi", true}, // the handler took the connection: outcome unknown
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := countServer(t, "ip:1/min; count:401", tt.handler)
			code, body := get(t, srv.URL, false)
			if body != tt.body {
				t.Errorf("first response body %q, want %q", body, tt.body)
			}
			if code == http.StatusTooManyRequests {
				t.Fatalf("first request denied")
			}
			code, _ = get(t, srv.URL, false)
			if denied := code == http.StatusTooManyRequests; denied != tt.counted {
				t.Errorf("second request: status %d; want denied=%v", code, tt.counted)
			}
		})
	}
}

// TestCountPanic checks that a handler that panics leaves its request
// counted: its outcome is unknown.
func TestCountPanic(t *testing.T) {
	t.Parallel()
	srv, _ := countServer(t, "ip:1/min; count:401", func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler)
	})
	req, _ := http.NewRequest("GET", srv.URL, nil)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("aborted handler answered %d", res.StatusCode)
	}
	if code, _ := get(t, srv.URL, false); code != http.StatusTooManyRequests {
		t.Errorf("after a panicking handler: status %d, want 429", code)
	}
}

// TestCountExempt checks that an exempt role still bypasses everything: no
// limit, no Redis key.
func TestCountExempt(t *testing.T) {
	t.Parallel()
	srv, m := countServer(t, "ip:1/min; count:4xx; exempt:root", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(401)
	})
	for i := range 3 {
		if code, _ := get(t, srv.URL, true); code != 401 {
			t.Fatalf("exempt request %d: status %d, want 401", i, code)
		}
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("exempt requests stored keys %v", keys)
	}
	if code, _ := get(t, srv.URL, false); code != 401 {
		t.Errorf("first non-exempt request: status %d, want 401", code)
	}
	if code, _ := get(t, srv.URL, false); code != 429 {
		t.Errorf("second non-exempt request: status %d, want 429", code)
	}
}

func TestCountNeedsFinisher(t *testing.T) {
	t.Parallel()
	d := &funcDecider{allow: func(engine.Request) (engine.Decision, error) { return engine.Decision{Allowed: true}, nil }}
	_, err := middleware.New(rules.MustParse("ip:1/s; count:401"), d)
	if testutil.ConfigError(err, "decider", "") == nil {
		t.Errorf("New with a Decider that cannot give back: %v, want ErrNoFinish", err)
	}
	if _, err := middleware.New(rules.MustParse("ip:1/s"), d); err != nil {
		t.Errorf("New without count: %v", err)
	}
}
