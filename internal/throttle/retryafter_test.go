package throttle

import (
	"cmp"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestThrottleRetryAfterCapped: a hostile or broken upstream's wait is
// capped at the Transport's maximum, from either header, and a value that
// is no positive finite number or future date is ignored.
func TestThrottleRetryAfterCapped(t *testing.T) {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	const max = time.Hour
	for _, tc := range []struct {
		ms, s string
		max   time.Duration
		want  time.Duration
		ok    bool
	}{
		{ms: "999999999999", want: max, ok: true},
		{ms: "9e11", want: max, ok: true},
		{ms: "3600000", want: max, ok: true},
		{ms: "3599999", want: max - time.Millisecond, ok: true},
		{ms: "1e308", want: max, ok: true},
		{ms: strings.Repeat("9", 400), want: max, ok: true},
		{ms: "2500", max: time.Second, want: time.Second, ok: true},
		{ms: "NaN"}, {ms: "Inf"}, {ms: "+Inf"}, {ms: "1e400"}, {ms: "-5"}, {ms: "0"}, {ms: "soon"},
		{ms: "-5", s: "3", want: 3 * time.Second, ok: true},
		{ms: "NaN", s: "999999999", want: max, ok: true},
		{s: "99999999999999999999999", want: max, ok: true},
		{s: "3600", want: max, ok: true},
		{s: "120", max: time.Minute, want: time.Minute, ok: true},
		{s: now.Add(48 * time.Hour).Format(http.TimeFormat), want: max, ok: true},
		{s: "-1"}, {s: "1.5"}, {s: "+5"}, {s: "1e3"},
	} {
		h := http.Header{}
		if tc.ms != "" {
			h.Set("Retry-After-Ms", tc.ms)
		}
		if tc.s != "" {
			h.Set("Retry-After", tc.s)
		}
		capAt := cmp.Or(tc.max, max)
		got, ok := retryAfter(h, now, capAt)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(ms %q, s %q, max %v) = %v, %v; want %v, %v", tc.ms, tc.s, capAt, got, ok, tc.want, tc.ok)
		}
	}
}

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
		got, ok := retryAfter(tc.h, now, DefaultMaxBlock)
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
