package slidelimit_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
)

// TestAdminHandlerUndeclaredRole: with declared roles, AdminHandler given
// one that is not declared (superadmn) was accepted and served no one; it
// is refused at start-up: an error naming the role and the declared ones
// is logged when the handler is built, and every request is answered 500.
func TestAdminHandlerUndeclaredRole(t *testing.T) {
	t.Parallel()
	ways := map[string]slidelimit.Option{
		"WithRoles":  slidelimit.WithRoles("user", "admin", "superadmin"),
		"WithPolicy": slidelimit.WithMiddlewareOptions(middleware.WithPolicy(declared)),
	}
	for name, declare := range ways {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			log, logs := testutil.NewLogger(slog.LevelInfo)
			lim := onMiniredis(t, declare, slidelimit.WithIdentity(byHeader), slidelimit.WithLogger(log))
			h := lim.AdminHandler("superadmn")
			for _, want := range []string{"level=ERROR", `AdminHandler: role \"superadmn\" is not declared (declared roles: admin, superadmin, user)`} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log does not contain %s:\n%s", want, logs.String())
				}
			}
			for _, roles := range []string{"superadmn", "superadmin", ""} {
				req := httptest.NewRequest("GET", "/api/throttles", nil)
				req.Header.Set("X-User", "root")
				req.Header.Set("X-Role", roles)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusInternalServerError || w.Header().Get("Content-Type") != "application/problem+json" {
					t.Errorf("roles %q: %d %s, want a 500 problem", roles, w.Code, w.Header().Get("Content-Type"))
				}
			}
			before := logs.String()
			h = lim.AdminHandler("superadmin", "admin")
			if logs.String() != before {
				t.Errorf("declared roles logged: %s", strings.TrimPrefix(logs.String(), before))
			}
			req := httptest.NewRequest("GET", "/api/throttles", nil)
			req.Header.Set("X-User", "root")
			req.Header.Set("X-Role", "superadmin")
			w := httptest.NewRecorder()
			if h.ServeHTTP(w, req); w.Code != http.StatusOK {
				t.Errorf("declared role: %d %s", w.Code, w.Body)
			}
		})
	}
	// Without declared roles, names are not checked.
	log, logs := testutil.NewLogger(slog.LevelInfo)
	onMiniredis(t, slidelimit.WithLogger(log)).AdminHandler("superadmn")
	if logs.String() != "" {
		t.Errorf("undeclared policy checked the handler's roles: %s", logs.String())
	}
}

// TestUndeclaredIdentityRole: with declared roles, a caller whose identity
// carries another role (superadmn) was limited as anyone, silently; each
// such role value is logged once, however many requests carry it, and the
// values remembered are bounded whatever the roles' number and size.
func TestUndeclaredIdentityRole(t *testing.T) {
	t.Parallel()
	// serve returns a handler of a new Limiter with declared roles, and
	// its log.
	serve := func(t *testing.T) (func(roles string) int, *testutil.LogBuffer) {
		log, logs := testutil.NewLogger(slog.LevelInfo)
		lim := onMiniredis(t, slidelimit.WithRoles("user", "admin", "superadmin"), slidelimit.WithIdentity(byHeader),
			slidelimit.WithLogger(log))
		mux := http.NewServeMux()
		if err := lim.Handle(mux, "GET /files/{id}", ok, "ip:1000/min; exempt:superadmin"); err != nil {
			t.Fatal(err)
		}
		return func(roles string) int {
			req := httptest.NewRequest("GET", "/files/1", nil)
			req.Header.Set("X-User", "root")
			req.Header.Set("X-Role", roles)
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, req)
			return w.Code
		}, logs
	}
	get, logs := serve(t)
	for range 20 {
		get("superadmin")
		get("user")
	}
	if logs.String() != "" {
		t.Fatalf("declared roles logged: %s", logs.String())
	}
	for range 20 {
		if code := get("user superadmn"); code != http.StatusOK {
			t.Fatalf("GET: %d", code)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings for 20 requests with role superadmn, want 1:\n%s", n, logs.String())
	}
	for _, want := range []string{"role=superadmn", `declared="admin, superadmin, user"`, "path=/files/1"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("warning does not contain %s: %s", want, logs.String())
		}
	}

	// A flood of role values, a long one among them: at most 64 values
	// are logged, then one line says no more are; a role is logged and
	// kept by its first 64 bytes.
	get, logs = serve(t)
	long := strings.Repeat("x", 1<<20)
	get(long)
	for i := range 200 {
		get(fmt.Sprintf("flood%d", i))
	}
	get(long)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 65 || !strings.Contains(lines[64], "more than 64 undeclared identity roles; no more are logged") {
		t.Errorf("%d lines for 201 undeclared roles, want 64 roles and a last saying no more are logged; last: %s", len(lines), lines[len(lines)-1])
	}
	if !strings.Contains(lines[0], "role="+long[:64]+" ") {
		t.Errorf("a long role is not logged by its first 64 bytes: %.200s", lines[0])
	}

	// The roles come from the context too (the authentication's own
	// role.NewContext), not only from WithIdentity.
	log, logs := testutil.NewLogger(slog.LevelInfo)
	lim := onMiniredis(t, slidelimit.WithRoles("user", "admin"), slidelimit.WithLogger(log))
	mw, err := lim.Middleware("ip:1000/min; scope:ctx")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		req := httptest.NewRequest("GET", "/x", nil)
		req = req.WithContext(role.NewContext(req.Context(), role.Identity{User: "u", Roles: []role.Role{"admn"}}))
		mw(ok).ServeHTTP(httptest.NewRecorder(), req)
	}
	if n := strings.Count(logs.String(), "role=admn"); n != 1 {
		t.Errorf("role from the context logged %d times, want 1: %s", n, logs.String())
	}
}
