package slidelimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestSlotServesWithoutAllocating checks that the request path of a
// handler that follows rule overrides adds no allocation: one atomic load.
func TestSlotServesWithoutAllocating(t *testing.T) {
	s := &slot{}
	var n int
	s.set(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n++ }))
	w, r := httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)
	if a := testing.AllocsPerRun(1000, func() { s.ServeHTTP(w, r) }); a != 0 {
		t.Errorf("%v allocations per request", a)
	}
	if n == 0 {
		t.Error("the current handler was not called")
	}
}

// BenchmarkSlot measures what following rule overrides adds to a request:
// the slot's atomic load and call, against calling the handler directly.
func BenchmarkSlot(b *testing.B) {
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	w, r := httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil)
	b.Run("direct", func(b *testing.B) {
		var hh http.Handler = h
		for b.Loop() {
			hh.ServeHTTP(w, r)
		}
	})
	b.Run("slot", func(b *testing.B) {
		s := &slot{}
		s.set(h)
		b.ReportAllocs()
		for b.Loop() {
			s.ServeHTTP(w, r)
		}
	})
}
