package rules

import (
	"fmt"
	"strconv"

	"github.com/go-playground/validator/v10"

	"github.com/slidelimit/slidelimit/internal/rulelimits"
)

// Tags of the size rules (struct level).
const (
	tagMaxRules    = "maxrules"    // at most rulelimits.MaxRules rules in a list
	tagMaxWindows  = "maxwindows"  // at most rulelimits.MaxWindows windows in a list
	tagMaxDistinct = "maxdistinct" // at most rulelimits.MaxDistinctWindows in a distinct rule
)

// sizeLevel reports a rule list ls of list (the group's defaults, or
// "role(NAME)=") with more rules or windows than a request may
// carry: at its first rule, or window, beyond the bound. prefix is the
// namespace of ls relative to the struct being validated.
func sizeLevel(sl validator.StructLevel, prefix, list string, ls []Rule) {
	if len(ls) > rulelimits.MaxRules {
		name := prefix + "[" + strconv.Itoa(rulelimits.MaxRules) + "]"
		sl.ReportError(len(ls), name, name, tagMaxRules, list)
	}
	total := 0
	for _, l := range ls {
		total += len(l.Windows)
	}
	if total <= rulelimits.MaxWindows {
		return
	}
	n := 0
	for i, l := range ls {
		if n+len(l.Windows) > rulelimits.MaxWindows {
			name := prefix + "[" + strconv.Itoa(i) + "].Windows[" + strconv.Itoa(rulelimits.MaxWindows-n) + "]"
			sl.ReportError(total, name, name, tagMaxWindows, list)
			return
		}
		n += len(l.Windows)
	}
}

// distinctSize reports rule l, at namespace ns, a rule without a
// cost of a group with distinct:, when it has more than rulelimits.MaxDistinctWindows
// windows besides its in-flight one: at the first window beyond the bound.
func distinctSize(sl validator.StructLevel, ns string, l Rule) {
	n := 0
	for j, w := range l.Windows {
		if w.Concurrent {
			continue
		}
		if n++; n == rulelimits.MaxDistinctWindows+1 {
			name := ns + ".Windows[" + strconv.Itoa(j) + "]"
			sl.ReportError(rateWindows(l), name, name, tagMaxDistinct, l.ID())
			return
		}
	}
}

// rateWindows counts the windows of l that are not in-flight.
func rateWindows(l Rule) int {
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
	case "Rules " + tagMaxRules:
		return fmt.Sprintf("%s has %v rules, at most %d (one request checks them all in one redis call)", fe.Param(), val, rulelimits.MaxRules)
	case "Windows " + tagMaxWindows:
		return fmt.Sprintf("%s has %v windows, at most %d (one request checks them all in one redis call)", fe.Param(), val, rulelimits.MaxWindows)
	case "Windows " + tagMaxDistinct:
		return fmt.Sprintf("rule %s counts distinct values (distinct:) in %v windows, at most %d", fe.Param(), val, rulelimits.MaxDistinctWindows)
	}
	return ""
}
