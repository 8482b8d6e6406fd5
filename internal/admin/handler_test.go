package admin_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/admin"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/internal/tally"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// fake is a Source with canned answers; err, when set, is what every call
// returns.
type fake struct {
	top []tally.Denials
	err error
}

func (f *fake) TopDenied(context.Context, time.Duration, int) ([]tally.Denials, error) {
	return f.top, f.err
}
func (f *fake) Routes() []admin.Route {
	return []admin.Route{{Scope: "GET /x", Rules: []string{"user", "ip", "global"}}}
}
func (f *fake) Peek(_ context.Context, scope, id, s string) (engine.Decision, error) {
	if id == "ip" {
		return engine.Decision{}, &admin.BadInputError{Err: errors.New("not an address")}
	}
	return engine.Decision{Blocked: s == "alice", RetryAfter: 90 * time.Second,
		Windows: []engine.WindowState{{Window: rules.Window{Limit: 5, Period: time.Minute}, Used: 5, Reset: time.Second},
			{Window: rules.Window{Limit: 100, Calendar: ruletime.Month}, Used: 7, Remaining: 93, Reset: time.Hour}}}, f.err
}
func (f *fake) PeekByIP(ctx context.Context, scope, id, a string) (engine.Decision, error) {
	return engine.Decision{Blocked: true, RetryAfter: time.Minute}, f.err
}
func (f *fake) PeekStored(ctx context.Context, scope, id, stored string, hashed bool) (engine.Decision, error) {
	if strings.HasPrefix(stored, "ip:") {
		return f.PeekByIP(ctx, scope, id, strings.TrimPrefix(stored, "ip:"))
	}
	if _, v, ok := strings.Cut(stored, ":"); ok && !hashed {
		stored = v
	}
	return f.Peek(ctx, scope, id, stored)
}
func (f *fake) ResetStored(context.Context, string, string, string, bool) error { return f.err }
func (f *fake) Reset(context.Context, string, string, string) error             { return f.err }
func (f *fake) ResetByIP(context.Context, string, string, string) error         { return f.err }
func (f *fake) Overrides(context.Context) ([]admin.Override, error) {
	return []admin.Override{{Scope: "GET /x", Rules: "user:1/s"}}, f.err
}

func serve(h http.Handler, method, target string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: "op", Roles: []role.Role{"ops"}}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestAPI checks the answers' shapes: subjects as the application knows
// them, by-IP and hashed subjects marked, blocks found among the denied.
func TestAPI(t *testing.T) {
	t.Parallel()
	f := &fake{top: []tally.Denials{
		{Scope: "GET /x", Rule: "user", Subject: "user:alice", Denied: 9},
		{Scope: "GET /x", Rule: "user", Subject: "ip:192.0.2.1", Denied: 4},
		{Scope: "GET /x", Rule: "global", Subject: "global", Denied: 3},
		{Scope: "GET /x", Rule: "key(k)", Subject: "#abc", Hashed: true, Denied: 2},
	}}
	h := admin.New(f, admin.Config{}, "ops")
	for _, tc := range []struct{ target, want string }{
		{"/api/top?since=5m", `{"since":"5m","top":[{"scope":"GET /x","limiter":"user","subject":"alice","denied":9},` +
			`{"scope":"GET /x","limiter":"user","subject":"192.0.2.1","denied":4,"by_ip":true},` +
			`{"scope":"GET /x","limiter":"global","subject":"","denied":3},` +
			`{"scope":"GET /x","limiter":"key(k)","subject":"#abc","denied":2,"hashed":true,"ref":"#abc"}]}`},
		{"/api/top", `{"since":"1h",`},
		{"/api/blocks", `{"blocks":[{"scope":"GET /x","limiter":"user","subject":"alice","left":90},` +
			`{"scope":"GET /x","limiter":"user","subject":"192.0.2.1","by_ip":true,"left":60}]}`},
		{"/api/subject?subject=alice", `{"subject":"alice","usage":[{"scope":"GET /x","limiter":"user","subject":"alice","allowed":false,"blocked":90,` +
			`"windows":[{"limit":5,"period":60,"used":5,"remaining":0,"reset":1},` +
			`{"limit":100,"period":0,"calendar":"month","used":7,"remaining":93,"reset":3600}]}]}`},
	} {
		w := serve(h, "GET", tc.target)
		if w.Code != 200 || !strings.HasPrefix(w.Body.String(), tc.want) {
			t.Errorf("%s: %d %s\nwant %s", tc.target, w.Code, w.Body, tc.want)
		}
	}
}

// TestBackendErrorNotEchoed: a Source failure is a 503 that says nothing
// of it, and is logged.
func TestBackendErrorNotEchoed(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	h := admin.New(&fake{err: errors.New("dial tcp 10.1.2.3:6379: secret detail")}, admin.Config{Log: slog.New(slog.NewTextHandler(&logs, nil))}, "ops")
	for _, target := range []string{"/api/top", "/api/blocks", "/api/subject?subject=a", "/"} {
		w := serve(h, "GET", target)
		if strings.Contains(w.Body.String(), "secret") || strings.Contains(w.Body.String(), "10.1.2.3") {
			t.Errorf("%s echoes the error: %s", target, w.Body)
		}
		if target != "/" && (w.Code != 503 || w.Header().Get("Content-Type") != "application/problem+json") {
			t.Errorf("%s: %d %s", target, w.Code, w.Header().Get("Content-Type"))
		}
	}
	if !strings.Contains(logs.String(), "secret detail") {
		t.Error("the error was not logged")
	}
}

// TestPageCalendar: the page names a calendar window by its period.
func TestPageCalendar(t *testing.T) {
	t.Parallel()
	w := serve(admin.New(&fake{}, admin.Config{}, "ops"), "GET", "/?subject=bob")
	if w.Code != 200 || !strings.Contains(w.Body.String(), "calendar month") {
		t.Errorf("page: %d, no \"calendar month\" in\n%s", w.Code, w.Body)
	}
}
