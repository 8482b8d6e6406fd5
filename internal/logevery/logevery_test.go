package logevery

import (
	"testing"
	"time"
)

func TestThrottle(t *testing.T) {
	t.Parallel()
	th := Gate{Every: 10 * time.Second}
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		at         time.Duration
		ok         bool
		suppressed int64
	}{
		{0, true, 0},
		{time.Second, false, 0},
		{9 * time.Second, false, 0},
		{10 * time.Second, true, 2},
		{11 * time.Second, false, 0},
		{30 * time.Second, true, 1},
	} {
		ok, n := th.Allow(t0.Add(tc.at))
		if ok != tc.ok || n != tc.suppressed {
			t.Errorf("at %v: %v %d, want %v %d", tc.at, ok, n, tc.ok, tc.suppressed)
		}
	}
}
