package throttle

import (
	"strconv"
	"testing"
)

// The classes a throttle keeps statistics of are bounded: past
// maxClasses, a class counts as OtherClass, which is always among them.
func TestStatsClassesBounded(t *testing.T) {
	var s stats
	for i := range 3 * maxClasses {
		s.class("c" + strconv.Itoa(i)).admits.Add(1)
	}
	if len(s.classes) != maxClasses {
		t.Fatalf("%d classes kept, want %d", len(s.classes), maxClasses)
	}
	other := s.class(OtherClass)
	if got, want := other.admits.Load(), int64(3*maxClasses-(maxClasses-1)); got != want {
		t.Errorf("%s counted %d admissions, want the %d past the bound", OtherClass, got, want)
	}
	if s.class("c0") == other || s.class("c0").admits.Load() != 1 {
		t.Error("a class kept before the bound lost its own statistics")
	}
	// The bound holds with OtherClass seen first, too.
	var s2 stats
	s2.class(OtherClass)
	for i := range 2 * maxClasses {
		s2.class("c" + strconv.Itoa(i))
	}
	if len(s2.classes) != maxClasses {
		t.Fatalf("%d classes kept, want %d", len(s2.classes), maxClasses)
	}
}
