package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// limitFunc is a limit function (WithLimitFunc).
type limitFunc = func(ctx context.Context) (int64, error)

// WithLimitFunc registers fn as the limit function name: every window whose
// limit is $name, as in key(tenant):$quota/min, has the limit fn returns
// for the request, from 1 to the window's cap (rules.Rule.LimitCap).
// ctx is the request's context, where authentication put the identity.
// fn is called before the handler, at most once per request and name; an
// error wrapping ErrBadRequest is answered with 400, any other error or
// limit with 500, nothing counted. Every limit function a group names must
// be registered when New is called (a *ConfigError otherwise). name is
// spelled like a cost function name.
func WithLimitFunc(name string, fn func(ctx context.Context) (int64, error)) Option {
	return func(c *config) { registerFunc(c, &c.limits, "WithLimitFunc", "limit", name, fn, fn == nil) }
}

// limitPlan is how a plan with limit functions resolves its windows; plans
// without any have none, and serve their requests as before.
type limitPlan struct {
	names  []string    // the functions the plan names, each once
	fns    []limitFunc // fns[k] is registered under names[k]
	checks []int       // the checks with a dynamic window, in order
	fnOf   []int       // per window of those checks, in order: index in names, or -1 for a written limit
}

// newLimitPlan prepares the dynamic windows of ls; it returns nil when ls
// has none.
func newLimitPlan(role string, ls []rules.Rule, fns map[string]limitFunc) (*limitPlan, error) {
	var lp *limitPlan
	var errs []error
	for i, l := range ls {
		if !lifecycle.Dynamic(l) {
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
						errs = append(errs, unregistered("WithLimitFunc", w.LimitFunc, "unknown limit function "+strconv.Quote(w.LimitFunc)+" in window "+w.String()+" of rule "+l.ID(), role))
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
// with a *lifecycle.LimitError.
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
		lim := &p.Rules[i]
		dst := ws[at : at+len(lim.Windows) : at+len(lim.Windows)]
		for j, w := range lim.Windows {
			k := lp.fnOf[at+j]
			if k < 0 {
				dst[j] = w
				continue
			}
			if vals[k] == 0 {
				n, err := lp.fns[k](r.Context())
				if err == nil && n < 1 {
					err = fmt.Errorf("returned limit %d, want at least 1", n)
				}
				if err != nil {
					return "", &lifecycle.LimitError{Name: lp.names[k], Rule: lim.ID(), Window: w.String(), Limit: n, Err: err}
				}
				vals[k] = n
			}
			rw, err := lifecycle.Resolve(*lim, w, vals[k])
			if err != nil {
				return "", &lifecycle.LimitError{Name: lp.names[k], Rule: lim.ID(), Window: w.String(), Limit: vals[k], Err: err}
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
