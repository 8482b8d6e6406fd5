package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/rulesx"
	"github.com/slidelimit/slidelimit/rules"
)

// LimitFunc returns the limit of the windows whose limit names it, as in
// key(tenant):$quota/min: for a SaaS API, the figure of the calling
// tenant's plan or contract. It is called on the request's goroutine before
// the handler runs, at most once per request and name, and must be safe for
// concurrent use. It must return a limit from 1 to the cap of each window
// naming it (100,000 for an exact window of a
// limiter without a cost); a request it cannot serve a limit for should be
// refused with an error wrapping ErrLimitBadRequest (answered with 400).
// Any other error, a limit below 1 or above a cap is answered with 500.
// Errors are logged, never written to clients; the request is not counted.
//
// Because the engine keeps requests, not limits, the value applies at once
// to what a subject has used: a lower limit denies until enough of its
// requests leave the window, a higher one admits at once.
type LimitFunc func(r *http.Request) (int64, error)

// Errors of limit functions.
var (
	// ErrUnknownLimit means a group names a limit function, as in
	// $quota/min, but no LimitFunc is registered under its name.
	ErrUnknownLimit = errors.New("middleware: no limit function registered")
	// ErrLimit means a limit function failed or returned a limit outside
	// 1..the window's cap. The request is not counted and is answered with
	// 500, or with 400 when the error wraps ErrLimitBadRequest.
	ErrLimit = lifecycle.ErrLimit
	// ErrLimitBadRequest is for limit functions to wrap when the request
	// itself has no limit, such as a token naming no tenant; the
	// middleware then answers 400 instead of 500. The error's text is never
	// written to the client.
	ErrLimitBadRequest = lifecycle.ErrLimitBadRequest
)

// WithLimitFunc registers fn as the limit function name: every window whose
// limit is $name, as in key(tenant):$quota/min, has the limit fn returns
// for the request. Every limit function a group names (including its
// overrides) must be registered when New is called, or New fails with an
// *UnknownLimitError. name is spelled like a cost function name: a letter,
// then letters, digits, '_', '-' or '.'. Registering a name again replaces
// the function.
func WithLimitFunc(name string, fn LimitFunc) Option {
	return func(c *config) { registerFunc(c, &c.limits, "WithLimitFunc", "limit", name, fn, fn == nil) }
}

// UnknownLimitError reports a window whose limit names no registered
// LimitFunc. It unwraps to ErrUnknownLimit.
type UnknownLimitError struct {
	// Name is the limit function name used by the group.
	Name string
	// Limiter is the ID of the limiter whose window names it, and Window
	// the window as rule text writes it ("$quota/min").
	Limiter, Window string
	// Role is the role whose override uses the limiter, or empty for the
	// group's default limiters.
	Role string
}

// Error implements the error interface.
func (e *UnknownLimitError) Error() string {
	s := "middleware: unknown limit function " + strconv.Quote(e.Name) + " in window " + e.Window + " of limiter " + e.Limiter
	if e.Role != "" {
		s += " of role(" + e.Role + ") override"
	}
	return s + " (use WithLimitFunc)"
}

// Unwrap returns ErrUnknownLimit.
func (e *UnknownLimitError) Unwrap() error { return ErrUnknownLimit }

// LimitError reports a limit function that failed, or returned a limit its
// window cannot have, for one request. It unwraps to ErrLimit and to the
// cause: the function's error, or the rules error for a value outside
// 1..cap.
type LimitError struct {
	// Name is the limit function name.
	Name string
	// Limiter is the ID of the limiter whose window names it, and Window
	// the window as rule text writes it.
	Limiter, Window string
	// Limit is what the function returned.
	Limit int64
	// Err is the cause.
	Err error
}

// Error implements the error interface.
func (e *LimitError) Error() string {
	return "middleware: limit function " + strconv.Quote(e.Name) + " for window " + e.Window + " of limiter " +
		e.Limiter + ": " + e.Err.Error()
}

// Unwrap returns ErrLimit and the cause.
func (e *LimitError) Unwrap() []error { return []error{ErrLimit, e.Err} }

// limitPlan is how a plan with limit functions resolves its windows; plans
// without any have none, and serve their requests as before.
type limitPlan struct {
	names  []string    // the functions the plan names, each once
	fns    []LimitFunc // fns[k] is registered under names[k]
	checks []int       // the checks with a dynamic window, in order
	fnOf   []int       // per window of those checks, in order: index in names, or -1 for a written limit
}

// newLimitPlan prepares the dynamic windows of ls; it returns nil when ls
// has none.
func newLimitPlan(role string, ls []rules.Limiter, fns map[string]LimitFunc) (*limitPlan, error) {
	var lp *limitPlan
	var errs []error
	for i, l := range ls {
		if !rulesx.Dynamic(l) {
			continue
		}
		if lp == nil {
			lp = &limitPlan{}
		}
		lp.checks = append(lp.checks, i)
		for _, w := range l.Windows {
			k := -1
			if w.LimitFunc != "" {
				k = lp.nameIndex(w.LimitFunc)
				if k < 0 {
					fn, ok := fns[w.LimitFunc]
					if !ok {
						errs = append(errs, &UnknownLimitError{Name: w.LimitFunc, Limiter: l.ID(), Window: w.String(), Role: role})
					}
					k = len(lp.names)
					lp.names, lp.fns = append(lp.names, w.LimitFunc), append(lp.fns, fn)
				}
			}
			lp.fnOf = append(lp.fnOf, k)
		}
	}
	return lp, errors.Join(errs...)
}

func (lp *limitPlan) nameIndex(name string) int {
	for k, n := range lp.names {
		if n == name {
			return k
		}
	}
	return -1
}

// resolveLimits gives the dynamic windows of a request's checks the limits
// of their functions, calling each function once, and returns the
// RateLimit-Policy field with those limits. The resolved windows share one
// slice; a static plan's field is p.Field and costs nothing here. It fails
// with a *LimitError.
func (mp *plan) resolveLimits(r *http.Request, p *lifecycle.Plan, cs []engine.Check) (string, error) {
	lp := mp.limits
	if lp == nil {
		return p.Field, nil
	}
	var buf [4]int64 // the values of the functions, by index in names; 0 = not called yet
	vals := buf[:0]
	if len(lp.names) <= len(buf) {
		vals = buf[:len(lp.names)]
	} else {
		vals = make([]int64, len(lp.names))
	}
	ws := make([]rules.Window, len(lp.fnOf))
	at := 0
	for _, i := range lp.checks {
		lim := &p.Limiters[i]
		dst := ws[at : at+len(lim.Windows) : at+len(lim.Windows)]
		for j, w := range lim.Windows {
			k := lp.fnOf[at+j]
			if k < 0 {
				dst[j] = w
				continue
			}
			if vals[k] == 0 {
				n, err := lp.fns[k](r)
				if err == nil && n < 1 {
					err = fmt.Errorf("returned limit %d, want at least 1", n)
				}
				if err != nil {
					return "", &LimitError{Name: lp.names[k], Limiter: lim.ID(), Window: w.String(), Limit: n, Err: err}
				}
				vals[k] = n
			}
			rw, err := rulesx.Resolve(*lim, w, vals[k])
			if err != nil {
				return "", &LimitError{Name: lp.names[k], Limiter: lim.ID(), Window: w.String(), Limit: vals[k], Err: err}
			}
			dst[j] = rw
		}
		cs[i].Windows = dst
		at += len(lim.Windows)
	}
	// The static field, whose dynamic windows say q=0, plus room for
	// their digits: one allocation for the text, one for the string.
	b := make([]byte, 0, len(p.Field)+20*len(lp.fnOf))
	for i := range cs {
		for j, w := range cs[i].Windows {
			b = lifecycle.AppendPolicy(b, &p.Policies[p.Index[i][j]], w.Limit)
		}
	}
	return string(b), nil
}
