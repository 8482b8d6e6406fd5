package slidelimit_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/admin"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/role"
)

// asUser authenticates a test request: X-User names the caller, X-Role
// its role; no X-User leaves the request anonymous.
func asUser(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-User"); u != "" {
			id := role.Identity{User: u}
			if ro := r.Header.Get("X-Role"); ro != "" {
				id.Roles = []role.Role{role.Role(ro)}
			}
			r = r.WithContext(role.NewContext(r.Context(), id))
		}
		next.ServeHTTP(w, r)
	})
}

// adminService is one process: a route limited per user with a block, and
// the admin handler under /admin/ui/ for the role ops.
func adminService(t *testing.T, c engine.Client, prefix string, log *slog.Logger) *httptest.Server {
	t.Helper()
	lim, err := slidelimit.New(c, slidelimit.WithEngineOptions(engine.WithKeyPrefix(prefix), engine.WithTimeout(5*time.Second),
		engine.WithLogger(log)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	if err := lim.Handle(mux, "GET /files", ok, "user:1/min; block:10m"); err != nil {
		t.Fatal(err)
	}
	if err := lim.Handle(mux, "GET /other", ok, "ip:100/min"); err != nil {
		t.Fatal(err)
	}
	mux.Handle("/admin/ui/", http.StripPrefix("/admin/ui", lim.AdminHandler("ops")))
	s := httptest.NewServer(asUser(mux))
	t.Cleanup(s.Close)
	return s
}

func call(t *testing.T, method, u, user, ro string, body io.Reader, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("X-User", user)
	}
	if ro != "" {
		req.Header.Set("X-Role", ro)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// TestAdminHandler: two processes share one Redis; three users are denied
// 18, 8 and 1 times, most of the denials cached; within 15 s either
// process's /api/top?since=1h lists exactly 18, 8 and 1 in that order, the
// page names them, the blocks are listed and a reset lifts one (logged
// with who), and access and input are checked.
func TestAdminHandler(t *testing.T) {
	t.Parallel()
	for name, c := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prefix := "t" + strings.ReplaceAll(t.Name(), "/", "-") + ":"
			log, logs := testutil.NewLogger(slog.LevelInfo)
			s1 := adminService(t, c, prefix, log)
			s2 := adminService(t, c, prefix, log)
			for user, n := range map[string]int{"alice": 18, "bob": 8, "carol": 1} {
				for i := range n + 1 {
					s := []*httptest.Server{s1, s2}[i%2]
					res, _ := call(t, "GET", s.URL+"/files", user, "", nil)
					if want := map[bool]int{true: 200, false: 429}[i == 0]; res.StatusCode != want {
						t.Fatalf("%s request %d: %d, want %d", user, i, res.StatusCode, want)
					}
				}
			}
			want := []admin.Denied{{Scope: "GET /files", Rule: "user", Subject: "alice", Denied: 18}, {Scope: "GET /files", Rule: "user", Subject: "bob", Denied: 8},
				{Scope: "GET /files", Rule: "user", Subject: "carol", Denied: 1}}
			var top admin.TopAnswer
			for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(100 * time.Millisecond) {
				res, body := call(t, "GET", s2.URL+"/admin/ui/api/top?since=1h", "root", "ops", nil)
				if res.StatusCode != 200 {
					t.Fatalf("top: %d %s", res.StatusCode, body)
				}
				top = admin.TopAnswer{}
				if err := json.Unmarshal([]byte(body), &top); err != nil {
					t.Fatal(err)
				}
				// Each process flushes its own tallies: wait for all of them
				// (they arrive in any order), not for the first and last.
				if slices.Equal(top.Top, want) {
					break
				}
			}
			if top.Since != "1h" || len(top.Top) != 3 || top.Top[0] != want[0] || top.Top[1] != want[1] || top.Top[2] != want[2] {
				t.Fatalf("top: %+v, want %+v", top, want)
			}
			_, page := call(t, "GET", s1.URL+"/admin/ui/", "root", "ops", nil)
			for _, u := range []string{"alice", "bob", "carol", "Active blocks"} {
				if !strings.Contains(page, u) {
					t.Errorf("the page does not name %s", u)
				}
			}
			if strings.Contains(page, "<script") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
				t.Error("the page has a script or an external reference")
			}
			_, body := call(t, "GET", s1.URL+"/admin/ui/api/blocks", "root", "ops", nil)
			var blocks admin.BlocksAnswer
			json.Unmarshal([]byte(body), &blocks)
			if len(blocks.Blocks) != 3 || blocks.Blocks[0].Left < 500 || blocks.Blocks[0].Left > 600 {
				t.Fatalf("blocks: %s", body)
			}
			_, body = call(t, "GET", s1.URL+"/admin/ui/api/subject?subject=alice", "root", "ops", nil)
			var usage admin.SubjectAnswer
			json.Unmarshal([]byte(body), &usage)
			if len(usage.Usage) != 1 || usage.Usage[0].Scope != "GET /files" || usage.Usage[0].Blocked < 500 ||
				len(usage.Usage[0].Windows) != 1 || usage.Usage[0].Windows[0].Used != 1 || usage.Usage[0].Windows[0].Limit != 1 {
				t.Fatalf("subject alice: %s", body)
			}
			// The page's form, from the page's origin: lifted, back to the page.
			form := url.Values{"page": {"1"}, "scope": {"GET /files"}, "limiter": {"user"}, "subject": {"bob"}}
			res, body := call(t, "POST", s1.URL+"/admin/ui/api/reset", "root", "ops", strings.NewReader(form.Encode()),
				"Content-Type", "application/x-www-form-urlencoded", "Origin", s1.URL, "Sec-Fetch-Site", "same-origin")
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "../" {
				t.Fatalf("reset from the page: %d %s %s", res.StatusCode, res.Header.Get("Location"), body)
			}
			// The other process drops its cached denial when the reset's
			// invalidation reaches it (on a Cluster, over the cluster bus):
			// bob is asked for until then, a denial counting nothing.
			for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
				res, _ := call(t, "GET", s2.URL+"/files", "bob", "", nil)
				if res.StatusCode == 200 {
					break
				}
				if time.Since(start) > 5*time.Second {
					t.Errorf("bob after the reset: %d for 5 s", res.StatusCode)
					break
				}
			}
			if !strings.Contains(logs.String(), "admin: reset") || !strings.Contains(logs.String(), "by=root") {
				t.Errorf("the reset was not logged with who: %s", logs.String())
			}
			// The same form from another site is refused.
			res, _ = call(t, "POST", s1.URL+"/admin/ui/api/reset", "root", "ops", strings.NewReader(form.Encode()),
				"Content-Type", "application/x-www-form-urlencoded", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("cross-site reset: %d, want 403", res.StatusCode)
			}
			// JSON, from a client that is no browser.
			res, body = call(t, "POST", s1.URL+"/admin/ui/api/reset", "root", "ops",
				strings.NewReader(`{"scope":"GET /files","limiter":"user","subject":"carol"}`), "Content-Type", "application/json")
			if res.StatusCode != 200 || !strings.Contains(body, `"reset":true`) {
				t.Errorf("JSON reset: %d %s", res.StatusCode, body)
			}
			for _, tc := range []struct {
				method, path, user, role string
				status                   int
			}{
				{"GET", "/admin/ui/", "", "", 401},
				{"GET", "/admin/ui/api/top", "", "", 401},
				{"GET", "/admin/ui/api/top", "alice", "user", 403},
				{"GET", "/admin/ui/", "alice", "", 403},
				{"POST", "/admin/ui/api/reset", "alice", "user", 403},
				{"GET", "/admin/ui/api/top?since=2h", "root", "ops", 400},
				{"GET", "/admin/ui/api/subject", "root", "ops", 400},
				{"GET", "/admin/ui/api/reset", "root", "ops", 405},
				{"POST", "/admin/ui/api/reset?scope=nope&limiter=user&subject=x", "root", "ops", 400},
			} {
				var b io.Reader
				if tc.method == "POST" {
					b = strings.NewReader("scope=nope&limiter=user&subject=x")
				}
				res, body := call(t, tc.method, s1.URL+tc.path, tc.user, tc.role, b, "Content-Type", "application/x-www-form-urlencoded")
				if res.StatusCode != tc.status {
					t.Errorf("%s %s as %s/%s: %d, want %d", tc.method, tc.path, tc.user, tc.role, res.StatusCode, tc.status)
				}
				if tc.status != 405 && res.Header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s %s: %s body %s", tc.method, tc.path, res.Header.Get("Content-Type"), body)
				}
			}
		})
	}
}

// TestAdminHandlerNoRoles: with no roles, the handler serves no one.
func TestAdminHandlerNoRoles(t *testing.T) {
	t.Parallel()
	mc := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer mc.Close()
	lim, err := slidelimit.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	h := lim.AdminHandler()
	for _, ro := range []role.Role{"", "admin", "superadmin"} {
		r := httptest.NewRequest("GET", "/", nil)
		r = r.WithContext(role.NewContext(context.Background(), role.Identity{User: "root", Roles: []role.Role{ro}}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 403 {
			t.Errorf("role %q: %d, want 403", ro, w.Code)
		}
	}
}
