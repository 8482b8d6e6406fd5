// Package rulesx holds what the packages of this module need of rule
// groups beyond package rules' public API: role checks with offsets, the
// dialects of other transports, limit functions and calendar zones. The
// bounds and untyped helpers are in internal/rulespec.
package rulesx

import (
	"fmt"
	"iter"
	"time"

	"github.com/slidelimit/slidelimit/internal/rulespec"
	"github.com/slidelimit/slidelimit/rules"
)

// Lists yields g's limiter lists: the defaults, with role "", then each
// override's limiters with its role, in declaration order.
func Lists(g *rules.Group) iter.Seq2[string, []rules.Limiter] {
	return func(yield func(string, []rules.Limiter) bool) {
		if !yield("", g.Limiters) {
			return
		}
		for _, o := range g.Overrides {
			if !yield(o.Role, o.Limiters) {
				return
			}
		}
	}
}

// Counts reports whether an admitted request whose response has the given
// status stays counted under g's count: statement (see rulespec.Counts).
func Counts(g *rules.Group, status int) bool { return rulespec.Counts(g.Count, status) }

// Zone returns the time zone of g's calendar windows (Group.Calendar), UTC
// when none is named. It fails as rulespec.LoadZone does.
func Zone(g *rules.Group) (*time.Location, error) { return rulespec.LoadZone(g.Calendar) }

// Named reports whether limiters of kind k take a name in parentheses.
func Named(k rules.Kind) bool { return rulespec.Named(string(k)) }

// Dynamic reports whether some window of l has a limit function.
func Dynamic(l rules.Limiter) bool {
	for _, w := range l.Windows {
		if w.LimitFunc != "" {
			return true
		}
	}
	return false
}

// LimitCap returns the largest limit window w of l may have (see
// rulespec.LimitCap). Validation holds written limits to it, and Resolve
// the values of limit functions.
func LimitCap(l rules.Limiter, w rules.Window) int64 {
	return rulespec.LimitCap(l.Cost, w.Grain, w.Calendar)
}

// Resolve returns window w of l with limit n, the value its limit function
// returned for one request. It keeps LimitFunc, so the result still prints
// as $name, and fails when n is below 1 or above LimitCap(l, w): a limit
// function is held to the rules a written limit obeys.
func Resolve(l rules.Limiter, w rules.Window, n int64) (rules.Window, error) {
	if n < 1 {
		return rules.Window{}, fmt.Errorf("rules: limit %d of window %s is below 1", n, w)
	}
	if c := LimitCap(l, w); n > c {
		return rules.Window{}, fmt.Errorf("rules: window %s of limiter %s: %s", w, l.ID(), rulespec.LimitAbove(fmt.Sprint(n), c == rulespec.MaxLimit))
	}
	w.Limit = n
	return w, nil
}

// Wildcards returns the names of the wildcards ({name} and {name...}) of
// an http.ServeMux pattern in the order they appear: the names param(name)
// limiters of its route may use. It checks the pattern as http.ServeMux
// does, which panics on a malformed one, and fails with a *rules.Error
// locating the problem in the pattern.
func Wildcards(pattern string) ([]string, error) {
	names, off, reason := rulespec.ParsePattern(pattern)
	if reason != "" {
		return nil, &rules.Error{Input: pattern, Offset: off, Reason: reason}
	}
	return names, nil
}
