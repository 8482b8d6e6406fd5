package slidelimit_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/admin"
	"github.com/slidelimit/slidelimit/internal/keyparts"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/rules"
)

// keyService is one process: a route limited per API key with a block, a
// route limited per user with a block, and the admin handler under
// /admin/ui/ for the role ops.
func keyService(t *testing.T, c engine.Client, prefix string, log *slog.Logger, opts ...slidelimit.Option) *httptest.Server {
	t.Helper()
	opts = append([]slidelimit.Option{slidelimit.WithEngineOptions(engine.WithKeyPrefix(prefix),
		engine.WithTimeout(5*time.Second), engine.WithLogger(log))}, opts...)
	lim, err := slidelimit.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	mux := http.NewServeMux()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	if err := lim.Handle(mux, "GET /keys", ok, "header(X-Api-Key):1/min; block:10m"); err != nil {
		t.Fatal(err)
	}
	if err := lim.Handle(mux, "GET /files", ok, "user:1/min; block:10m"); err != nil {
		t.Fatal(err)
	}
	mux.Handle("/admin/ui/", http.StripPrefix("/admin/ui", lim.AdminHandler("ops")))
	s := httptest.NewServer(asUser(mux))
	t.Cleanup(s.Close)
	return s
}

// topOf waits until /api/top of s lists n denials, and returns them.
func topOf(t *testing.T, s *httptest.Server, n int64) (admin.TopAnswer, string) {
	t.Helper()
	var top admin.TopAnswer
	var body string
	for start := time.Now(); time.Since(start) < 15*time.Second; time.Sleep(100 * time.Millisecond) {
		var res *http.Response
		res, body = call(t, "GET", s.URL+"/admin/ui/api/top?since=1h", "root", "ops", nil)
		if res.StatusCode != 200 {
			t.Fatalf("top: %d %s", res.StatusCode, body)
		}
		top = admin.TopAnswer{}
		if err := json.Unmarshal([]byte(body), &top); err != nil {
			t.Fatal(err)
		}
		if denials(top) >= n {
			break
		}
	}
	if denials(top) < n {
		t.Fatalf("top: %s, want %d denials", body, n)
	}
	return top, body
}

func denials(top admin.TopAnswer) int64 {
	var n int64
	for _, d := range top.Top {
		n += d.Denied
	}
	return n
}

// formFields returns the hidden fields of the page's Lift block forms.
var hiddenField = regexp.MustCompile(`<input type="hidden" name="(\w+)" value="([^"]*)">`)

// TestAdminMasksKeys: API keys (header subjects) are masked by default,
// with WithHashedSubjects too: the page, its forms, /api/top, /api/blocks,
// a search's usage rows, a reset's answer and its log line never carry
// them, only a fingerprint; the page's Lift block form lifts a key's
// block by that fingerprint, from another process. A key over 128 bytes
// is masked alike. slidelimit.WithMaskedSubjects() shows them.
func TestAdminMasksKeys(t *testing.T) {
	t.Parallel()
	for name, c := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, hashed := range []bool{false, true} {
				prefix := "t" + strings.ReplaceAll(t.Name(), "/", "-") + ":" + map[bool]string{true: "h:"}[hashed]
				log, logs := testutil.NewLogger(slog.LevelInfo)
				var opts []slidelimit.Option
				if hashed {
					opts = append(opts, slidelimit.WithHashedSubjects([]byte("s3cret")))
				}
				s1 := keyService(t, c, prefix, log, opts...)
				s2 := keyService(t, c, prefix, log, opts...)
				short := "sk_live_0123456789abcdefSECRET"
				long := "sk_live_" + strings.Repeat("LONGSECRET", 30)
				for _, key := range []string{short, long} {
					for i := range 3 {
						res, _ := call(t, "GET", []*httptest.Server{s1, s2}[i%2].URL+"/keys", "", "", nil, "X-Api-Key", key)
						if want := map[bool]int{true: 200, false: 429}[i == 0]; res.StatusCode != want {
							t.Fatalf("key request %d: %d, want %d", i, res.StatusCode, want)
						}
					}
				}
				clean := func(what, body string) {
					t.Helper()
					for _, secret := range []string{"sk_live_", "SECRET"} {
						if strings.Contains(body, secret) {
							t.Errorf("hashed %v: %s holds the key (%s):\n%s", hashed, what, secret, body)
						}
					}
				}
				top, body := topOf(t, s1, 4)
				clean("/api/top", body)
				for _, d := range top.Top {
					if !d.Masked || !strings.HasPrefix(d.Subject, "~") || len(d.Subject) != 13 || d.Ref == "" || d.Denied != 2 {
						t.Errorf("hashed %v: top entry %+v, want masked by a fingerprint, with a ref, denied twice", hashed, d)
					}
				}
				_, body = call(t, "GET", s2.URL+"/admin/ui/api/blocks", "root", "ops", nil)
				clean("/api/blocks", body)
				var blocks admin.BlocksAnswer
				json.Unmarshal([]byte(body), &blocks)
				if len(blocks.Blocks) != 2 || !blocks.Blocks[0].Masked || blocks.Blocks[0].Ref == "" {
					t.Fatalf("hashed %v: blocks %s, want the two keys, masked, with refs", hashed, body)
				}
				_, page := call(t, "GET", s1.URL+"/admin/ui/", "root", "ops", nil)
				clean("the page", page)
				if !strings.Contains(page, top.Top[0].Subject) {
					t.Errorf("hashed %v: the page does not show the fingerprint %s", hashed, top.Top[0].Subject)
				}
				// The page's first Lift block form, posted to the other
				// process: the key is admitted again.
				form := url.Values{}
				for _, m := range hiddenField.FindAllStringSubmatch(page[strings.Index(page, `id="blocks"`):], -1) {
					if _, seen := form[m[1]]; seen {
						break // the next form
					}
					form.Set(m[1], m[2])
				}
				if form.Get("ref") == "" || form.Get("subject") != "" {
					t.Fatalf("hashed %v: the Lift block form has fields %v, want a ref", hashed, form)
				}
				res, body := call(t, "POST", s2.URL+"/admin/ui/api/reset", "root", "ops", strings.NewReader(form.Encode()),
					"Content-Type", "application/x-www-form-urlencoded", "Origin", s2.URL, "Sec-Fetch-Site", "same-origin")
				if res.StatusCode != http.StatusSeeOther {
					t.Fatalf("hashed %v: lift: %d %s", hashed, res.StatusCode, body)
				}
				// Another process's cached denial of the key goes when the
				// reset's invalidation reaches it (on a Cluster, through the
				// cluster bus): poll until one key is admitted; the other
				// stays blocked.
				admitted := map[string]bool{}
				for start := time.Now(); len(admitted) == 0 && time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
					for _, key := range []string{short, long} {
						if res, _ := call(t, "GET", s1.URL+"/keys", "", "", nil, "X-Api-Key", key); res.StatusCode == 200 {
							admitted[key] = true
						}
					}
				}
				if len(admitted) != 1 {
					t.Errorf("hashed %v: %d keys admitted after lifting one block", hashed, len(admitted))
				}
				// A reset by value, in JSON: answered and logged by the
				// fingerprint.
				res, body = call(t, "POST", s1.URL+"/admin/ui/api/reset", "root", "ops",
					strings.NewReader(`{"scope":"GET /keys","limiter":"header(X-Api-Key)","subject":"`+short+`"}`), "Content-Type", "application/json")
				if res.StatusCode != 200 {
					t.Fatalf("hashed %v: JSON reset: %d %s", hashed, res.StatusCode, body)
				}
				clean("the JSON reset's answer", body)
				if !strings.Contains(logs.String(), "admin: reset") || !strings.Contains(logs.String(), "ref=~") && !strings.Contains(logs.String(), "ref=#") {
					t.Errorf("hashed %v: the reset by ref was not logged with its ref: %s", hashed, logs.String())
				}
				// A search's usage rows name the key by its fingerprint.
				_, body = call(t, "GET", s1.URL+"/admin/ui/api/subject?subject="+url.QueryEscape(short), "root", "ops", nil)
				var usage admin.SubjectAnswer
				json.Unmarshal([]byte(body), &usage)
				for _, u := range usage.Usage {
					if u.Rule == "header(X-Api-Key)" && (!u.Masked || strings.Contains(u.Subject, "SECRET")) {
						t.Errorf("hashed %v: usage row %+v, want masked", hashed, u)
					}
				}
				clean("the log", logs.String())
			}
		})
	}
}

// TestAdminUnmasked: slidelimit.WithMaskedSubjects() shows header values; a kind
// that has no subjects is refused by New.
func TestAdminUnmasked(t *testing.T) {
	t.Parallel()
	c := backends(t)["miniredis"]
	log, _ := testutil.NewLogger(slog.LevelInfo)
	s := keyService(t, c, "unmasked:", log, slidelimit.WithMaskedSubjects())
	for range 2 {
		call(t, "GET", s.URL+"/keys", "", "", nil, "X-Api-Key", "visible-key")
	}
	top, _ := topOf(t, s, 1)
	if d := top.Top[0]; d.Subject != "visible-key" || d.Masked || d.Ref != "" {
		t.Errorf("top entry %+v, want the key in clear", d)
	}
	if _, err := slidelimit.New(c, slidelimit.WithMaskedSubjects(rules.Global)); err == nil {
		t.Error("New took slidelimit.WithMaskedSubjects(rules.Global)")
	}
}

// TestAdminLongSubject: a user id over 128 bytes, which the engine stores
// hashed and the tallies keep only the start of, is listed by its first
// bytes with a ref, and its block is lifted through the page's form.
func TestAdminLongSubject(t *testing.T) {
	t.Parallel()
	for name, c := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prefix := "t" + strings.ReplaceAll(t.Name(), "/", "-") + ":"
			log, _ := testutil.NewLogger(slog.LevelInfo)
			s := keyService(t, c, prefix, log)
			user := "user-" + strings.Repeat("x", 300)
			for i := range 3 {
				res, _ := call(t, "GET", s.URL+"/files", user, "", nil)
				if want := map[bool]int{true: 200, false: 429}[i == 0]; res.StatusCode != want {
					t.Fatalf("request %d: %d, want %d", i, res.StatusCode, want)
				}
			}
			top, body := topOf(t, s, 2)
			d := top.Top[0]
			if !d.Truncated || d.Masked || !strings.HasPrefix(d.Subject, "user-xxx") || !strings.HasSuffix(d.Subject, "…") ||
				len(d.Subject) > 64 || !keyparts.IsStoredHash(d.Ref) {
				t.Fatalf("top entry %+v, want the start of the id, truncated, with its stored hash as ref", d)
			}
			if strings.Contains(body, strings.Repeat("x", 100)) {
				t.Errorf("/api/top holds the whole id: %s", body)
			}
			_, page := call(t, "GET", s.URL+"/admin/ui/", "root", "ops", nil)
			if !strings.Contains(page, `name="ref" value="`+d.Ref+`"`) {
				t.Fatalf("the page has no Lift block form for the id's ref %s:\n%s", d.Ref, page)
			}
			form := url.Values{"page": {"1"}, "scope": {"GET /files"}, "limiter": {"user"}, "ref": {d.Ref}}
			res, body := call(t, "POST", s.URL+"/admin/ui/api/reset", "root", "ops", strings.NewReader(form.Encode()),
				"Content-Type", "application/x-www-form-urlencoded", "Origin", s.URL, "Sec-Fetch-Site", "same-origin")
			if res.StatusCode != http.StatusSeeOther {
				t.Fatalf("lift: %d %s", res.StatusCode, body)
			}
			if res, _ := call(t, "GET", s.URL+"/files", user, "", nil); res.StatusCode != 200 {
				t.Errorf("after the lift: %d, want 200", res.StatusCode)
			}
		})
	}
}
