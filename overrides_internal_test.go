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
