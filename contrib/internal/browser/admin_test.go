package browser_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/internal/browser"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/role"
)

// bearer authenticates "Authorization: Bearer NAME"; root is an operator.
func bearer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && name != "" {
			id := role.Identity{User: name}
			if name == "root" {
				id.Roles = []role.Role{"ops"}
			}
			r = r.WithContext(role.NewContext(r.Context(), id))
		}
		next.ServeHTTP(w, r)
	})
}

// TestAdminPageInBrowser loads the operator's page of a service under a
// flood in headless Chromium, finds the flooding user at the top and
// blocked, lifts the block with the page's button and sees it gone.
func TestAdminPageInBrowser(t *testing.T) {
	path := browser.Path()
	if path == "" {
		if os.Getenv(browser.RequireEnv) != "" {
			t.Fatal("no chromium on PATH, and " + browser.RequireEnv + " is set")
		}
		t.Skip("no chromium on PATH (apt-get install chromium)")
	}
	_, mc := redistest.Mini(t)
	lim, err := slidelimit.New(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	mux := http.NewServeMux()
	if err := lim.Handle(mux, "GET /api/items", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}),
		"user:5/min; block:10m"); err != nil {
		t.Fatal(err)
	}
	mux.Handle("/admin/ui/", http.StripPrefix("/admin/ui", lim.AdminHandler("ops")))
	srv := httptest.NewServer(bearer(mux))
	t.Cleanup(srv.Close)

	get := func(user, path string) *http.Response {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+user)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	// The flood: mallory from 4 callers, alice a little over her limit.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				get("mallory", "/api/items")
			}
		})
	}
	for range 7 {
		get("alice", "/api/items")
	}
	wg.Wait()
	// Wait for the tallies (written about once a second).
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest("GET", srv.URL+"/admin/ui/api/top?since=1m", nil)
		req.Header.Set("Authorization", "Bearer root")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var top struct{ Top []struct{ Subject string } }
		json.NewDecoder(res.Body).Decode(&top)
		res.Body.Close()
		if len(top.Top) == 2 {
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("top after 15 s: %+v", top)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bctx, stop := browser.New(ctx, path, t.TempDir())
	defer stop()
	if err := browser.Authorize(bctx, "Bearer root"); err != nil {
		t.Fatal(err)
	}
	// No network beyond loopback.
	if err := chromedp.Do(bctx, chromedp.Navigate("http://example.com/")); err == nil {
		t.Error("the browser reached example.com")
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/admin/ui/"), chromedp.WaitVisible(chromedp.CSS("#blocks"))); err != nil {
		t.Fatal(err)
	}
	first, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#top-1m tr:nth-child(2)")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first, "mallory") || !strings.Contains(first, "395") {
		t.Fatalf("first of the last minute: %q, want mallory denied 395 times", first)
	}
	blocks, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#blocks")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(blocks, "mallory") || !strings.Contains(blocks, "alice") {
		t.Fatalf("blocks: %q", blocks)
	}
	// Lift mallory's block with the button of its row; the page comes back.
	button := chromedp.Search(`//table[@id="blocks"]//tr[td/code[text()="mallory"]]//button`)
	if err := chromedp.Do(bctx, chromedp.Click(button), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
		t.Fatal(err)
	}
	var after string
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
		after, err = chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#blocks")))
		if err == nil && !strings.Contains(after, "mallory") {
			break
		}
	}
	if strings.Contains(after, "mallory") || !strings.Contains(after, "alice") {
		t.Fatalf("blocks after lifting mallory's: %q", after)
	}
	if res := get("mallory", "/api/items"); res.StatusCode != 200 {
		t.Errorf("mallory after the lift: %d", res.StatusCode)
	}
}
