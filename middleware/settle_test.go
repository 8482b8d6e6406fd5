package middleware_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// settleRecorder admits every request and records the actual costs it
// is asked to settle a request to (a request given back, or whose costs
// are unknown, settles nothing).
type settleRecorder struct {
	funcDecider
	actual [][]int64
}

func (s *settleRecorder) FinishAsync(_ engine.Decision, o engine.Outcome) {
	if !o.GiveBack && o.Actual != nil {
		s.actual = append(s.actual, o.Actual)
	}
}

// TestSettleSteps checks what the settlement step asks for: the bytes
// written (by Write or ReadFrom), a reported cost first, the debt cap, and
// nothing for a request that count: gives back or whose rules do not
// settle.
func TestSettleSteps(t *testing.T) {
	t.Parallel()
	d := &settleRecorder{}
	d.allow = func(req engine.Request) (engine.Decision, error) { return admitted(req), nil }
	estimate := func(*http.Request) (int64, error) { return 100, nil }
	mw, err := middleware.New(rules.MustParse("user:5/s; user[bytes]:1Gi/d; user[tokens]:1k/min; count:2xx"), d,
		middleware.WithCostFunc("bytes", estimate),
		middleware.WithCostFunc("tokens", estimate),
		middleware.WithSettle("bytes", middleware.Settlement{Written: true, MaxDebt: 50}),
		middleware.WithSettle("tokens", middleware.Settlement{MaxDebt: -1}),
		middleware.WithScope("s"))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("fail") != "" {
			w.WriteHeader(500)
		}
		if q.Get("tokens") != "" {
			middleware.ReportCost(r.Context(), "tokens", 999)
		}
		if q.Get("copy") != "" {
			_, _ = io.Copy(w, strings.NewReader(strings.Repeat("x", 70)))
		}
		_, _ = w.Write([]byte(q.Get("body")))
	}))
	for _, tc := range []struct {
		target string
		want   []int64 // nil: no settlement
	}{
		{"/?body=hello", []int64{-1, 5, -1}},
		{"/?copy=1&body=abc", []int64{-1, 73, -1}},
		{"/?copy=1&body=" + strings.Repeat("y", 200), []int64{-1, 150, -1}}, // a debt of 170 capped at 50
		{"/?tokens=1", []int64{-1, 0, 100}},                                 // NoDebt: 999 reported, 100 kept
		{"/?fail=1&body=abc", nil},                                          // given back by count:
	} {
		d.actual = nil
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", tc.target, nil))
		if tc.want == nil {
			if d.actual != nil {
				t.Errorf("%s: settled %v, want nothing", tc.target, d.actual)
			}
			continue
		}
		if len(d.actual) != 1 || !equal(d.actual[0], tc.want) {
			t.Errorf("%s: settled %v, want %v", tc.target, d.actual, tc.want)
		}
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestSettleConfig checks the errors of WithSettle.
func TestSettleConfig(t *testing.T) {
	t.Parallel()
	g := rules.MustParse("user[bytes]:1Gi/d")
	cost := middleware.WithCostFunc("bytes", func(*http.Request) (int64, error) { return 1, nil })
	d := &funcDecider{allow: func(req engine.Request) (engine.Decision, error) { return admitted(req), nil }}
	if _, err := middleware.New(g, d, cost, middleware.WithSettle("bytes", middleware.Settlement{})); testutil.ConfigError(err, "decider", "") == nil {
		t.Errorf("a Decider that cannot settle: %v, want ErrNoFinish", err)
	}
	var ce *middleware.ConfigError
	s := &settleRecorder{}
	if _, err := middleware.New(g, s, cost, middleware.WithSettle("1x", middleware.Settlement{})); !errors.As(err, &ce) || ce.Option != "WithSettle" {
		t.Errorf("bad name: %v, want a *ConfigError for WithSettle", err)
	}
	if _, err := middleware.New(g, s, cost, middleware.WithSettle("bytes", middleware.Settlement{MaxDebt: -2})); !errors.As(err, &ce) {
		t.Errorf("MaxDebt -2: %v, want a *ConfigError", err)
	}
	if middleware.ReportCost(context.Background(), "bytes", 1) {
		t.Error("ReportCost outside a settled request = true, want false")
	}
}
