package redistest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestClock: a new Clock reads Epoch, Set and SetTime place it, Add moves
// it on, in whole microseconds.
func TestClock(t *testing.T) {
	c := redistest.NewClock()
	if got := c.Now(); !got.Equal(redistest.Epoch) {
		t.Fatalf("new clock reads %v, want %v", got, redistest.Epoch)
	}
	c.Set(90 * time.Second)
	c.Add(1500 * time.Nanosecond)
	if got, want := c.Now(), redistest.Epoch.Add(90*time.Second+time.Microsecond); !got.Equal(want) {
		t.Fatalf("after Set and Add: %v, want %v", got, want)
	}
	at := time.Date(2031, 2, 3, 4, 5, 6, 7000, time.UTC)
	c.SetTime(at)
	if got := c.Now(); !got.Equal(at) {
		t.Fatalf("after SetTime: %v, want %v", got, at)
	}
}

// TestPrefix: prefixes end in a colon and differ between calls.
func TestPrefix(t *testing.T) {
	a, b := redistest.Prefix(t), redistest.Prefix(t)
	if a == b || !strings.HasSuffix(a, ":") || len(a) != 14 {
		t.Fatalf("prefixes %q and %q: want two different 14-byte prefixes ending in ':'", a, b)
	}
}

// TestMini: the client answers from the miniredis it came with.
func TestMini(t *testing.T) {
	m, c := redistest.Mini(t)
	if err := c.Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get("k"); got != "v" {
		t.Fatalf("miniredis holds %q, want v", got)
	}
}

// TestEventually: it returns once the condition holds, having polled it
// until then.
func TestEventually(t *testing.T) {
	n := 0
	redistest.Eventually(t, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
}
