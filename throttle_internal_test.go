package slidelimit

import (
	"net/http"
	"testing"
	"time"
)

func TestThrottleRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second, true},
		{http.Header{"Retry-After": {now.Add(-time.Second).Format(http.TimeFormat)}}, 0, false},
		{http.Header{"Retry-After": {"0"}}, 0, false},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
		{http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"2"}}, 1500 * time.Millisecond, true},
		{http.Header{}, 0, false},
	} {
		got, ok := retryAfter(tc.h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%v) = %v, %v; want %v, %v", tc.h, got, ok, tc.want, tc.ok)
		}
	}
}

// A slow reply must not move the arrival stamps: Redis may have read its
// clock anywhere within a long round trip.
func TestFleetClockKeepsPreciseSample(t *testing.T) {
	t.Parallel()
	const skew = 5 * time.Second
	f := &fleet{}
	start := time.Now().Add(-2 * time.Millisecond)
	f.clock(start.Add(time.Millisecond+skew), start)
	within := func(what string) {
		t.Helper()
		if got := time.Duration(f.offset.Load()) * time.Microsecond; got < skew-2*time.Millisecond || got > skew+2*time.Millisecond {
			t.Fatalf("%s: offset %v, want %v ± 2ms", what, got, skew)
		}
	}
	within("first sample")
	slow := time.Now().Add(-200 * time.Millisecond)
	f.clock(slow.Add(190*time.Millisecond+skew), slow)
	within("after a 200ms sample")
	f.clock(time.Time{}, time.Now())
	within("after a reply without a time")
}
