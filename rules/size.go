package rules

import (
	"fmt"
	"strconv"

	"github.com/go-playground/validator/v10"
)

// Size limits of a rule group. A request applies one limiter list, the
// group's defaults or one role's override (Group.LimiterLists), and the
// engine sends all of it to Redis in one script call, one check per
// limiter and every window of each: these bounds keep that call bounded,
// and the engine refuses a request beyond them. The rule language refuses
// such a list where it is written, so that a group that parses never fails
// its requests for its size.
const (
	// MaxLimiters is the largest number of limiters in a limiter list
	// (the engine's checks per request).
	MaxLimiters = 64
	// MaxWindows is the largest number of windows over every limiter of a
	// limiter list, in-flight and calendar windows included (the engine's
	// windows per request).
	MaxWindows = 256
	// MaxDistinctWindows is the largest number of windows of a limiter
	// that counts distinct values (Group.Distinct), not counting its
	// in-flight window: Redis answers which windows held the value in one
	// bit per window.
	MaxDistinctWindows = 30
)

// Tags of the size rules (struct level).
const (
	tagMaxLimiters = "maxlimiters" // at most MaxLimiters limiters in a list
	tagMaxWindows  = "maxwindows"  // at most MaxWindows windows in a list
	tagMaxDistinct = "maxdistinct" // at most MaxDistinctWindows in a distinct limiter
)

// sizeLevel reports a limiter list ls of list (the group's defaults, or
// "override role(NAME)=") with more limiters or windows than a request may
// carry: at its first limiter, or window, beyond the bound. prefix is the
// namespace of ls relative to the struct being validated.
func sizeLevel(sl validator.StructLevel, prefix, list string, ls []Limiter) {
	if len(ls) > MaxLimiters {
		name := prefix + "[" + strconv.Itoa(MaxLimiters) + "]"
		sl.ReportError(len(ls), name, name, tagMaxLimiters, list)
	}
	total := 0
	for _, l := range ls {
		total += len(l.Windows)
	}
	if total <= MaxWindows {
		return
	}
	n := 0
	for i, l := range ls {
		if n+len(l.Windows) > MaxWindows {
			name := prefix + "[" + strconv.Itoa(i) + "].Windows[" + strconv.Itoa(MaxWindows-n) + "]"
			sl.ReportError(total, name, name, tagMaxWindows, list)
			return
		}
		n += len(l.Windows)
	}
}

// distinctSize reports limiter l, at namespace ns, a limiter without a
// cost of a group with distinct:, when it has more than MaxDistinctWindows
// windows besides its in-flight one: at the first window beyond the bound.
func distinctSize(sl validator.StructLevel, ns string, l Limiter) {
	n := 0
	for j, w := range l.Windows {
		if w.Concurrent {
			continue
		}
		if n++; n == MaxDistinctWindows+1 {
			name := ns + ".Windows[" + strconv.Itoa(j) + "]"
			sl.ReportError(rateWindows(l), name, name, tagMaxDistinct, l.ID())
			return
		}
	}
}

// rateWindows counts the windows of l that are not in-flight.
func rateWindows(l Limiter) int {
	n := 0
	for _, w := range l.Windows {
		if !w.Concurrent {
			n++
		}
	}
	return n
}

// sizeReason words the failures of the size rules, or returns "".
func sizeReason(key string, fe validator.FieldError, val any) string {
	switch key {
	case "Limiters " + tagMaxLimiters:
		return fmt.Sprintf("%s has %v limiters, at most %d (MaxLimiters: one request checks them all in one redis call)", fe.Param(), val, MaxLimiters)
	case "Windows " + tagMaxWindows:
		return fmt.Sprintf("%s has %v windows, at most %d (MaxWindows: one request checks them all in one redis call)", fe.Param(), val, MaxWindows)
	case "Windows " + tagMaxDistinct:
		return fmt.Sprintf("limiter %s counts distinct values (distinct:) in %v windows, at most %d (MaxDistinctWindows)", fe.Param(), val, MaxDistinctWindows)
	}
	return ""
}
