// Package rulelimits holds the bounds of the rule language, shared by
// package rules, which holds written rules to them, and the packages that
// check rules built in Go or limits computed per request. It imports
// nothing of this module.
package rulelimits

import (
	"fmt"
	"time"
)

// Limits of the rule language (see the rules package documentation,
// section Rules). Every request admitted by an exact window (one without a
// grain) is an entry of a Redis sorted set for the longest window of its
// rule, so Redis memory per subject grows with the limit; a window with
// a grain, or of a rule with a cost, does not, and may have a far larger
// limit.
const (
	// MaxLimit is the largest limit of an exact window of a rule
	// without a cost, and the most slots of an in-flight window. The
	// engine, which also takes windows built in Go, accepts such windows up
	// to its own, larger bound, engine.MaxCountLimit.
	MaxLimit = 100_000
	// MaxBoundedLimit is the largest limit of any other window: 2^50,
	// below 2^53 so that sums of costs stay exact in the doubles of
	// Redis's Lua.
	MaxBoundedLimit = 1 << 50
	// MinPeriod is the shortest period a window may have.
	MinPeriod = time.Millisecond
	// MaxPeriod is the longest period a window may have.
	MaxPeriod = 30 * 24 * time.Hour
	// MaxRules is the largest number of rules in a rule list:
	// one request checks them all in one Redis call (engine.MaxChecks).
	MaxRules = 64
	// MaxWindows is the largest number of windows over every rule of a
	// rule list, in-flight and calendar windows included
	// (engine.MaxWindows).
	MaxWindows = 256
	// MaxDistinctWindows is the largest number of windows of a rule
	// that counts distinct values, besides its in-flight window: Redis
	// answers which windows held the value in one bit per window.
	MaxDistinctWindows = 30
)

// LimitCap returns the largest limit of a window of a rule with the
// given cost ("" for none), grain and calendar unit: MaxLimit for an exact
// sliding window of a rule without a cost, MaxBoundedLimit otherwise (a
// calendar window is one counter whatever its limit).
func LimitCap(cost string, grain time.Duration, calendar string) int64 {
	if cost == "" && grain == 0 && calendar == "" {
		return MaxLimit
	}
	return MaxBoundedLimit
}

// memoryNote is part of every "limit too high" message of an exact window
// because its cap exists for Redis memory, not for arithmetic; it names the
// way out.
const memoryNote = "redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624"

// LimitAbove words a limit above its cap: exact is true for an exact window
// (no grain, no calendar) of a rule without a cost.
func LimitAbove(limit string, exact bool) string {
	if exact {
		return fmt.Sprintf("limit %s is above %d; %s", limit, MaxLimit, memoryNote)
	}
	return fmt.Sprintf("limit %s is above %d (2^50), the largest limit, so that sums of costs stay exact in redis's lua numbers", limit, int64(MaxBoundedLimit))
}
