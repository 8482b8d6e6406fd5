package throttle

import (
	"errors"
	"fmt"
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
	Calls    func(*http.Request) ([]Call, error)           // WithCalls: WaitAny over them; with Call, an error
	Use      func(*http.Request, int) *http.Request        // WithCalls: the request to send for the call chosen; nil: the same
	Actual   func(*http.Response) map[string]int64         // WithActual
	Body     func(*http.Response, []byte) map[string]int64 // WithActualBody
	Bytes    []string                                      // WithActualBytes's cost names
	MaxBlock time.Duration                                 // the cap on a learned block; <= 0: DefaultMaxBlock
}

// DefaultMaxBlock is the longest block a Transport learns from an
// upstream's answer without TransportConfig.MaxBlock.
const DefaultMaxBlock = time.Hour

// Transport returns an http.RoundTripper that sends each request through
// base (http.DefaultTransport when nil) once t admits it, as Wait does
// (as WaitAny does with cfg.Calls), and finishes its Permit when the
// response body is closed, or once the body becomes unreachable
// unclosed. Every response is given to Permit.Learn with cfg.MaxBlock.
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
	p, send, err := tr.admit(r)
	if err != nil {
		return fail(err)
	}
	resp, err := tr.base.RoundTrip(send)
	if err != nil {
		p.Finish(nil)
		return nil, err
	}
	p.Learn(resp, tr.cfg.MaxBlock)
	resp.Body = newFinishBody(&tr.cfg, resp, p)
	return resp, nil
}

// admit waits for r's call, or for the first fit of its calls under
// WithCalls, and returns its Permit and the request to send.
func (tr *throttleTransport) admit(r *http.Request) (*Permit, *http.Request, error) {
	if tr.cfg.Calls == nil {
		var c Call
		if tr.cfg.Call != nil {
			var err error
			if c, err = tr.cfg.Call(r); err != nil {
				return nil, nil, err
			}
		}
		p, err := tr.t.Wait(r.Context(), c)
		return p, r, err
	}
	if tr.cfg.Call != nil {
		return nil, nil, tr.t.cfg.ConfigError(fmt.Errorf("%w: %w", ErrCall, ErrCallAndCalls))
	}
	calls, err := tr.cfg.Calls(r)
	if err != nil {
		return nil, nil, err
	}
	p, i, err := tr.t.WaitAny(r.Context(), calls...)
	if err != nil {
		return nil, nil, err
	}
	send := r
	if tr.cfg.Use != nil {
		if s := tr.cfg.Use(r, i); s != nil {
			send = s
		}
	}
	return p, send, nil
}

// ErrCallAndCalls is the error of a Transport given both WithCall and
// WithCalls.
var ErrCallAndCalls = errors.New("slidelimit: a Transport takes WithCall or WithCalls, not both")

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
