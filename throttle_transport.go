package slidelimit

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// TransportOption configures Throttle.Transport.
type TransportOption func(*transportConfig)

type transportConfig struct {
	call     func(*http.Request) (Call, error)
	actual   func(*http.Response) map[string]int64
	body     func(*http.Response, []byte) map[string]int64 // WithActualBody
	bytes    []string                                      // WithActualBytes's cost names
	maxBlock time.Duration                                 // <= 0: DefaultMaxUpstreamBlock
}

// WithCall makes the Transport build each request's Call with fn: the
// values of its key(NAME) limiters (an API key from a header) and the
// estimates of its costs (max_tokens from the body). An error fails the
// round trip without sending it. Without WithCall every request is Call{}.
func WithCall(fn func(*http.Request) (Call, error)) TransportOption {
	return func(c *transportConfig) { c.call = fn }
}

// WithActual makes the Transport settle each admitted request's costs to
// what fn reads from the response, such as a usage header, once the
// response body is closed: headers and trailers are complete then. Cost
// names fn leaves out keep their estimate; so do all of them without
// WithActual, WithActualBody or WithActualBytes.
func WithActual(fn func(*http.Response) map[string]int64) TransportOption {
	return func(c *transportConfig) { c.actual = fn }
}

// DefaultMaxUpstreamBlock is the longest block a Transport learns from an
// upstream's answer, unless WithMaxUpstreamBlock says otherwise.
const DefaultMaxUpstreamBlock = time.Hour

// WithMaxUpstreamBlock caps the block a Transport learns from a 429 or 503
// (retry-after-ms, or Retry-After in seconds or as an HTTP date) at d: a
// longer wait asked for holds the call's subjects for d. d <= 0 means
// DefaultMaxUpstreamBlock, one hour. The other processes are told the
// capped block. A process holds a block it hears of from another at most
// the largest cap of its own Transports of the throttle, one hour when it
// has none.
func WithMaxUpstreamBlock(d time.Duration) TransportOption {
	return func(c *transportConfig) { c.maxBlock = d }
}

// Transport returns an http.RoundTripper that sends each request through
// base (http.DefaultTransport when nil) once t admits it, as Wait does, and
// finishes the Permit when the response body is closed. A 429 or 503 with
// Retry-After blocks the request's subjects fleet-wide for that long, at
// most an hour (WithMaxUpstreamBlock); Limiter.Reset of one of the
// subjects lifts the block. A header value that is no positive number or
// future date is ignored.
func (t *Throttle) Transport(base http.RoundTripper, opts ...TransportOption) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	tr := &throttleTransport{t: t, base: base}
	for _, o := range opts {
		if o != nil {
			o(&tr.cfg)
		}
	}
	if tr.cfg.maxBlock <= 0 {
		tr.cfg.maxBlock = DefaultMaxUpstreamBlock
	}
	t.heldAtMost(tr.cfg.maxBlock)
	return tr
}

type throttleTransport struct {
	t    *Throttle
	base http.RoundTripper
	cfg  transportConfig
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
	if tr.cfg.call != nil {
		var err error
		if c, err = tr.cfg.call(r); err != nil {
			return fail(err)
		}
	}
	p, err := tr.t.waitFor(r.Context(), r, c)
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
		if d, ok := retryAfter(resp.Header, time.Now(), tr.cfg.maxBlock); ok && p.lane != nil {
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
