package throttle

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// TransportConfig is how a Transport builds calls and settles them; the
// root package's TransportOptions set it.
type TransportConfig struct {
	Call     func(*http.Request) (Call, error)             // WithCall; nil: Call{}
	Actual   func(*http.Response) map[string]int64         // WithActual
	Body     func(*http.Response, []byte) map[string]int64 // WithActualBody
	Bytes    []string                                      // WithActualBytes's cost names
	MaxBlock time.Duration                                 // the cap on a learned block; <= 0: DefaultMaxBlock
}

// DefaultMaxBlock is the longest block a Transport learns from an
// upstream's answer without TransportConfig.MaxBlock.
const DefaultMaxBlock = time.Hour

// Transport returns an http.RoundTripper that sends each request through
// base (http.DefaultTransport when nil) once t admits it, as Wait does,
// and finishes its Permit when the response body is closed, or once the
// body becomes unreachable unclosed. A 429 or 503 with a wait asked for
// blocks the request's subjects fleet-wide for that long, at most
// cfg.MaxBlock.
func (t *Throttle) Transport(base http.RoundTripper, cfg TransportConfig) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if cfg.MaxBlock <= 0 {
		cfg.MaxBlock = DefaultMaxBlock
	}
	t.heldAtMost(cfg.MaxBlock)
	return &throttleTransport{t: t, base: base, cfg: cfg}
}

type throttleTransport struct {
	t    *Throttle
	base http.RoundTripper
	cfg  TransportConfig
}

// RoundTrip implements http.RoundTripper.
func (tr *throttleTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	fail := func(err error) (*http.Response, error) {
		if r.Body != nil {
			_ = r.Body.Close() // a RoundTripper closes the body, even on errors
		}
		return nil, err
	}
	var c Call
	if tr.cfg.Call != nil {
		var err error
		if c, err = tr.cfg.Call(r); err != nil {
			return fail(err)
		}
	}
	p, err := tr.t.Wait(r.Context(), c)
	if err != nil {
		return fail(err)
	}
	resp, err := tr.base.RoundTrip(r)
	if err != nil {
		p.Finish(nil)
		return nil, err
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		tr.t.stats.upstream.Add(1)
		p.class.upstream429()
		if d, ok := retryAfter(resp.Header, time.Now(), tr.cfg.MaxBlock); ok && p.lane != nil {
			tr.t.fleet.block(p.lane, d)
		}
	}
	resp.Body = newFinishBody(&tr.cfg, resp, p)
	return resp, nil
}

// retryAfter reads how long an upstream asks to wait, at most max:
// retry-after-ms, or Retry-After in seconds or as an HTTP date. It
// reports false for none, for a time already past, and for a value that
// is no number (NaN, Inf, text) or not positive; a number too large for
// its type is a wait of max.
func retryAfter(h http.Header, now time.Time, max time.Duration) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		ms, err := strconv.ParseFloat(v, 64)
		switch {
		case err == nil && ms > 0 && !math.IsInf(ms, 1):
			if ms >= float64(max/time.Millisecond) {
				return max, true
			}
			if d := time.Duration(ms * float64(time.Millisecond)); d > 0 {
				return d, true
			}
		case errors.Is(err, strconv.ErrRange) && ms > 0 && allDigits(strings.TrimPrefix(v, "+")):
			return max, true // digits beyond float64's range
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if allDigits(v) {
		s, err := strconv.ParseInt(v, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange) || err == nil && s >= int64(max/time.Second):
			return max, true
		case err != nil || s == 0:
			return 0, false
		}
		return min(time.Duration(s)*time.Second, max), true
	}
	if at, err := http.ParseTime(v); err == nil {
		if d := at.Sub(now); d > 0 {
			return min(d, max), true
		}
	}
	return 0, false
}

// allDigits reports whether s is a non-empty run of ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
