package slidelimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestByteQuota runs a byte quota with a grain end to end on real Redis:
// small downloads pass, a large one that does not fit the day's bytes is
// denied while the request rule still has room, and is not counted.
func TestByteQuota(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client()
	sizes := map[string]int64{"small": 3000, "big": 8000}
	lim, err := slidelimit.New(rdb, slidelimit.WithCostFunc("bytes", func(r *http.Request) (int64, error) {
		return sizes[r.PathValue("id")], nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	mux := http.NewServeMux()
	if err := lim.Handle(mux, "GET /files/{id}", ok, "ip:100/min; ip[bytes]:10k/d~1h"); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		id     string
		status int
	}{
		{"small", 200}, {"small", 200}, // 6000 of 10000
		{"big", 429},   // 14000 would not fit
		{"small", 200}, // 9000
		{"small", 429},
	} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", "/files/"+tc.id, nil))
		if w.Code != tc.status {
			t.Fatalf("request %d (%s): %d, want %d: %s", i, tc.id, w.Code, tc.status, w.Body)
		}
		if p := w.Header().Get("RateLimit-Policy"); !strings.Contains(p, `qu="content-bytes"`) {
			t.Errorf("request %d: RateLimit-Policy %q without the byte unit", i, p)
		}
	}
}
