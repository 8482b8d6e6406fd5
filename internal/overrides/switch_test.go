package overrides

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestSwitchServesWithoutAllocating checks that the request path of a
// handler that follows rule overrides adds no allocation: one atomic load.
func TestSwitchServesWithoutAllocating(t *testing.T) {
	var n int
	s := Route{NewSwitch[http.Handler]("GET /", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n++ }), nil)}
	w, r := httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)
	if a := testing.AllocsPerRun(1000, func() { s.ServeHTTP(w, r) }); a != 0 {
		t.Errorf("%v allocations per request", a)
	}
	if n == 0 {
		t.Error("the current handler was not called")
	}
}

// BenchmarkSwitch measures what following rule overrides adds to a request:
// the Switch's atomic load and call, against calling the handler directly.
func BenchmarkSwitch(b *testing.B) {
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	w, r := httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)
	b.Run("direct", func(b *testing.B) {
		var hh http.Handler = h
		for b.Loop() {
			hh.ServeHTTP(w, r)
		}
	})
	b.Run("switch", func(b *testing.B) {
		s := Route{NewSwitch[http.Handler]("GET /", h, nil)}
		b.ReportAllocs()
		for b.Loop() {
			s.ServeHTTP(w, r)
		}
	})
}
