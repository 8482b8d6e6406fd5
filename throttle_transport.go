package slidelimit

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// TransportOption configures Throttle.Transport.
type TransportOption func(*transportConfig)

type transportConfig struct {
	call   func(*http.Request) (Call, error)
	actual func(*http.Response) map[string]int64
	body   func(*http.Response, []byte) map[string]int64 // WithActualBody
	bytes  []string                                      // WithActualBytes's cost names
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

// Transport returns an http.RoundTripper that sends each request through
// base (http.DefaultTransport when nil) once t admits it, as Wait does, and
// finishes the Permit when the response body is closed. A 429 or 503 with
// Retry-After blocks the request's subjects fleet-wide for that long.
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
		if d, ok := retryAfter(resp.Header, time.Now()); ok && p.lane != nil {
			tr.t.fleet.block(p.lane, d)
		}
	}
	resp.Body = newFinishBody(&tr.cfg, resp, p)
	return resp, nil
}

// retryAfter reads how long an upstream asks to wait: retry-after-ms, or
// Retry-After in seconds or as an HTTP date. It reports false for none,
// or for a time already past.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0, false
		}
		return min(time.Duration(min(s, int64(maxUpstreamBlock/time.Second)))*time.Second, maxUpstreamBlock), true
	}
	if at, err := http.ParseTime(v); err == nil {
		if d := at.Sub(now); d > 0 {
			return min(d, maxUpstreamBlock), true
		}
	}
	return 0, false
}

// maxUpstreamBlock caps a learned block, as the rules cap block:.
const maxUpstreamBlock = 30 * 24 * time.Hour
