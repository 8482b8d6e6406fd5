package rules

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"

	"github.com/slidelimit/slidelimit/internal/muxpattern"
	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/internal/ruletime"
)

// Validation is declared on the model (validate struct tags in model.go)
// and in the struct-level functions below, and run by one validator shared
// by every caller: validator.Validate caches struct metadata and is safe for
// concurrent use once its rules are registered, which happens here, before
// any caller can see it.
var validate, validateSetupErr = newValidator()

// Tags of the custom rules. The struct-level ones are only ever reported,
// never written in a struct tag.
const (
	tagRuleName       = "rulename"   // role and scope names
	tagWholeMS        = "wholems"    // periods the grammar can express (struct level)
	tagNameRequired   = "namereq"    // header, param, key need a name
	tagNameForbidden  = "namenone"   // ip, user, global take none
	tagHeaderName     = "headername" // RFC 9110 token
	tagParamName      = "paramname"  // ServeMux wildcard name
	tagKeyName        = "keyname"    // same characters as roles
	tagUniquePeriod   = "uperiod"    // one window per period
	tagUniqueRule     = "urule"      // one rule per ID in a list
	tagUniqueRole     = "urole"      // one role(...)= statement per role
	tagUniqueExempt   = "uexempt"    // each exempt role once
	tagExemptAndRules = "exemptrole" // a role is either exempt or has role rules
	tagNoRules        = "norules"    // something must be limited or exempt
	tagStatus         = "status"     // a count: item, 401 or 4xx
	tagUniqueCount    = "ucount"     // each count: item once
	tagCountClass     = "countclass" // a code not also listed by its class
	tagCost           = "cost"       // a cost name or positive constant
	tagCostLimit      = "costlimit"  // a constant cost within every limit
	tagExactMax       = "exactmax"   // rulelimits.MaxLimit for exact windows without cost
	tagBoundedMax     = "boundedmax" // rulelimits.MaxBoundedLimit for the others
	tagGrainMin       = "grainmin"   // grain at least minGrain
	tagGrainMS        = "grainms"    // grain in whole milliseconds
	tagGrainPeriod    = "grainper"   // grain shorter than the period
	tagGrainDivides   = "graindiv"   // grain divides the period
	tagGrainCount     = "graincount" // at most maxGrains grains per period
	tagLimitMin       = "min"        // a written limit of at least 1, as the field's tag words it
	tagLimitFunc      = "limitfunc"  // a limit function name
	tagLimitBoth      = "limitboth"  // a limit or a limit function, not both
	tagConcPeriod     = "concperiod" // an in-flight window has no period
	tagConcGrain      = "concgrain"  // nor a grain
	tagConcOne        = "uconc"      // at most one in-flight window per rule
	tagConcCost       = "conccost"   // none in a rule with a cost
	tagConcMax        = "concmax"    // at most rulelimits.MaxLimit slots
	tagPeriodMin      = "min"        // reported as the period's own tag would be
	tagPeriodMax      = "max"
	tagConcFunc       = "concfunc" // nor a limit function
	tagZone           = "zone"     // an IANA time zone ruletime.LoadZone loads
	tagCalUnit        = "calunit"  // day, week or month
	tagCalConc        = "calconc"  // no in-flight window with a calendar period
	tagCalPeriod      = "calper"   // a calendar window has no period
	tagCalGrain       = "calgrain" // nor a grain
	tagUniqueCalendar = "ucal"     // one calendar window per unit
	tagDistinctWin    = "dwin"     // distinct: counts in exact sliding windows
	tagUniqueShare    = "ushare"   // each class shared once
	tagShareSum       = "sharesum" // shares add up to at most 100%
)

func newValidator() (*validator.Validate, error) {
	v := validator.New()
	err := errors.Join(
		v.RegisterValidation(tagRuleName, func(fl validator.FieldLevel) bool {
			return validName(fl.Field().String())
		}),
		v.RegisterValidation(tagWholeMS, func(fl validator.FieldLevel) bool {
			f := fl.Field()
			return f.CanInt() && f.Int()%int64(time.Millisecond) == 0
		}),
		v.RegisterValidation(tagStatus, func(fl validator.FieldLevel) bool {
			return validStatus(fl.Field().String())
		}),
		v.RegisterValidation(tagZone, func(fl validator.FieldLevel) bool {
			_, err := ruletime.LoadZone(fl.Field().String())
			return err == nil
		}),
	)
	v.RegisterStructValidation(windowLevel, Window{})
	v.RegisterStructValidation(ruleLevel, Rule{})
	v.RegisterStructValidation(roleRulesLevel, RoleRules{})
	v.RegisterStructValidation(groupLevel, Group{})
	return v, err
}

// validName reports whether s is a role, scope or key name: ASCII letters,
// digits, '_', '-' and '.', none of which the grammar uses as a delimiter.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isWord(c) && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

// validIdent reports whether s is an ASCII Go identifier, which is what
// http.ServeMux accepts as a wildcard name (it also takes non-ASCII
// letters; the rule language does not).
func validIdent(s string) bool {
	if s == "" || isDigit(s[0]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isWord(s[i]) {
			return false
		}
	}
	return true
}

func ruleLevel(sl validator.StructLevel) {
	l, ok := sl.Current().Interface().(Rule)
	if !ok {
		return
	}
	switch {
	case l.Kind.named() && l.Name == "":
		sl.ReportError(l.Name, "Name", "Name", tagNameRequired, string(l.Kind))
	case !l.Kind.named() && l.Name != "" && kinds[string(l.Kind)] != "":
		sl.ReportError(l.Name, "Name", "Name", tagNameForbidden, string(l.Kind))
	case l.Kind == Header && !muxpattern.ValidToken(l.Name):
		sl.ReportError(l.Name, "Name", "Name", tagHeaderName, "")
	case l.Kind == Param && !validIdent(l.Name):
		sl.ReportError(l.Name, "Name", "Name", tagParamName, "")
	case l.Kind == Key && !validName(l.Name):
		sl.ReportError(l.Name, "Name", "Name", tagKeyName, "")
	}
	cost, constant, costOK := parseCost(l.Cost)
	if !costOK {
		sl.ReportError(l.Cost, "Cost", "Cost", tagCost, "")
	}
	seen := make(map[time.Duration]bool, len(l.Windows))
	seenCal := map[string]bool{}
	concurrent := false
	for i, w := range l.Windows {
		name := "Windows[" + strconv.Itoa(i) + "]"
		if w.Concurrent {
			switch {
			case l.Cost != "":
				sl.ReportError(w.Limit, name, name, tagConcCost, l.ID())
			case concurrent:
				sl.ReportError(w.Limit, name, name, tagConcOne, l.ID())
			case w.Limit > rulelimits.MaxLimit:
				sl.ReportError(w.Limit, name+".Limit", "Limit", tagConcMax, "")
			}
			concurrent = true
			continue
		}
		if w.Calendar != "" {
			if seenCal[w.Calendar] {
				sl.ReportError(w.Calendar, name, name, tagUniqueCalendar, l.ID())
			}
			seenCal[w.Calendar] = true
		} else {
			if seen[w.Period] {
				sl.ReportError(w.Period, name, name, tagUniquePeriod, l.ID())
			}
			seen[w.Period] = true
		}
		limitCap := rulelimits.LimitCap(l.Cost, w.Grain, w.Calendar)
		switch {
		case w.Limit > limitCap && limitCap == rulelimits.MaxLimit:
			sl.ReportError(w.Limit, name+".Limit", "Limit", tagExactMax, "")
		case w.Limit > rulelimits.MaxBoundedLimit:
			sl.ReportError(w.Limit, name+".Limit", "Limit", tagBoundedMax, "")
		case constant && w.Limit >= 1 && (cost < 0 || cost > w.Limit):
			sl.ReportError(l.Cost, name, name, tagCostLimit, strconv.FormatInt(w.Limit, 10)+" of window "+w.String())
		}
	}
}

// parseCost interprets the cost of a rule: constant reports a decimal
// constant, whose value is n, or -1 when it overflows an int64 (and so
// exceeds every limit); ok is false for a cost that is neither a valid
// constant (positive, without leading zeros, the form Parse stores) nor a
// valid cost function name. The empty cost is valid and not constant.
func parseCost(c string) (n int64, constant, ok bool) {
	if c == "" {
		return 0, false, true
	}
	if isDigit(c[0]) {
		for i := 1; i < len(c); i++ {
			if !isDigit(c[i]) {
				return 0, false, false
			}
		}
		if c[0] == '0' {
			return 0, true, false
		}
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil {
			n = -1
		}
		return n, true, true
	}
	return 0, false, validCostName(c)
}

// validCostName reports whether s is a cost function name: a letter, then
// letters, digits, '_', '-' and '.'.
func validCostName(s string) bool {
	return s != "" && isLetter(s[0]) && validName(s)
}

func windowLevel(sl validator.StructLevel) {
	w, ok := sl.Current().Interface().(Window)
	if !ok {
		return
	}
	switch {
	case w.LimitFunc == "" && w.Limit == 0:
		sl.ReportError(w.Limit, "Limit", "Limit", tagLimitMin, "")
	case w.LimitFunc != "" && !validCostName(w.LimitFunc):
		sl.ReportError(w.LimitFunc, "LimitFunc", "LimitFunc", tagLimitFunc, "")
	case w.LimitFunc != "" && w.Limit != 0:
		sl.ReportError(w.LimitFunc, "LimitFunc", "LimitFunc", tagLimitBoth, strconv.FormatInt(w.Limit, 10))
	}
	if w.Calendar != "" {
		calendarLevel(sl, w)
		return
	}
	if w.Concurrent {
		switch {
		case w.LimitFunc != "":
			sl.ReportError(w.LimitFunc, "LimitFunc", "LimitFunc", tagConcFunc, "")
		case w.Period != 0:
			sl.ReportError(w.Period, "Period", "Period", tagConcPeriod, "")
		case w.Grain != 0:
			sl.ReportError(w.Grain, "Grain", "Grain", tagConcGrain, "")
		}
		return
	}
	switch {
	case w.Period < rulelimits.MinPeriod:
		sl.ReportError(w.Period, "Period", "Period", tagPeriodMin, "")
	case w.Period > rulelimits.MaxPeriod:
		sl.ReportError(w.Period, "Period", "Period", tagPeriodMax, "")
	case w.Period%time.Millisecond != 0:
		sl.ReportError(w.Period, "Period", "Period", tagWholeMS, "")
	}
	if w.Grain == 0 {
		return
	}
	period := ruletime.FormatPeriod(w.Period)
	switch {
	case w.Grain < minGrain:
		sl.ReportError(w.Grain, "Grain", "Grain", tagGrainMin, "")
	case w.Grain%time.Millisecond != 0:
		sl.ReportError(w.Grain, "Grain", "Grain", tagGrainMS, "")
	case w.Period <= 0:
		// reported above; nothing to compare with
	case w.Grain >= w.Period:
		sl.ReportError(w.Grain, "Grain", "Grain", tagGrainPeriod, period)
	case w.Period%w.Grain != 0:
		sl.ReportError(w.Grain, "Grain", "Grain", tagGrainDivides, period)
	case w.Period/w.Grain > maxGrains:
		sl.ReportError(w.Grain, "Grain", "Grain", tagGrainCount, period+" into "+strconv.FormatInt(int64(w.Period/w.Grain), 10))
	}
}

// calendarLevel checks the fields of calendar window w.
func calendarLevel(sl validator.StructLevel, w Window) {
	switch {
	case !validCalendar(w.Calendar):
		sl.ReportError(w.Calendar, "Calendar", "Calendar", tagCalUnit, "")
	case w.Concurrent:
		sl.ReportError(w.Calendar, "Calendar", "Calendar", tagCalConc, "")
	case w.Period != 0:
		sl.ReportError(w.Period, "Period", "Period", tagCalPeriod, "")
	case w.Grain != 0:
		sl.ReportError(w.Grain, "Grain", "Grain", tagCalGrain, "")
	}
}

// uniqueRules reports every rule whose ID repeats an earlier one in
// the list: the engine keys windows by ID, so two would count one subject
// twice against different limits. Rate windows and in-flight windows are
// counted apart (a log and a slot key), so a rule of only the one may
// repeat the ID of a rule of only the other, as in
// "user:1 concurrent; user:20/h".
func uniqueRules(sl validator.StructLevel, prefix string, ls []Rule) {
	seen := make(map[string]bool, len(ls))
	for i, l := range ls {
		id := l.ID()
		rate, conc := false, false
		for _, w := range l.Windows {
			rate, conc = rate || !w.Concurrent, conc || w.Concurrent
		}
		if !rate && !conc {
			rate = true // no windows: reported elsewhere, still an ID
		}
		if rate && seen[id] || conc && seen[id+" concurrent"] {
			name := prefix + "[" + strconv.Itoa(i) + "]"
			sl.ReportError(id, name, name, tagUniqueRule, id)
		}
		seen[id] = seen[id] || rate
		seen[id+" concurrent"] = seen[id+" concurrent"] || conc
	}
}

func roleRulesLevel(sl validator.StructLevel) {
	if o, ok := sl.Current().Interface().(RoleRules); ok {
		uniqueRules(sl, "Rules", o.Rules)
		sizeLevel(sl, "Rules", "role("+o.Role+")=", o.Rules)
	}
}

func groupLevel(sl validator.StructLevel) {
	g, ok := sl.Current().Interface().(Group)
	if !ok {
		return
	}
	uniqueRules(sl, "Rules", g.Rules)
	sizeLevel(sl, "Rules", "group", g.Rules)
	distinctLevel(sl, g)
	sharesLevel(sl, g)
	hasRules := make(map[string]bool, len(g.RoleRules))
	for i, rr := range g.RoleRules {
		if hasRules[rr.Role] {
			name := "RoleRules[" + strconv.Itoa(i) + "].Role"
			sl.ReportError(rr.Role, name, name, tagUniqueRole, rr.Role)
		}
		hasRules[rr.Role] = true
	}
	exempt := make(map[string]bool, len(g.Exempt))
	for i, r := range g.Exempt {
		name := "Exempt[" + strconv.Itoa(i) + "]"
		switch {
		case exempt[r]:
			sl.ReportError(r, name, name, tagUniqueExempt, r)
		case hasRules[r]:
			sl.ReportError(r, name, name, tagExemptAndRules, r)
		}
		exempt[r] = true
	}
	counted := make(map[string]bool, len(g.Count))
	for _, c := range g.Count {
		counted[c] = true
	}
	for i, c := range g.Count {
		name := "Count[" + strconv.Itoa(i) + "]"
		switch {
		case !validStatus(c):
			// reported by the field's own tag
		case counted[c] && slices.Index(g.Count, c) < i:
			sl.ReportError(c, name, name, tagUniqueCount, c)
		case c[1] != 'x' && counted[statusClass(c)]:
			sl.ReportError(c, name, name, tagCountClass, statusClass(c))
		}
	}
	if len(g.Rules) == 0 && len(g.RoleRules) == 0 && len(g.Exempt) == 0 {
		sl.ReportError(g.Rules, "Rules", "Rules", tagNoRules, "")
	}
}

// Validate reports whether g obeys every rule of the model: the checks
// Parse applies after parsing, for groups built in Go. The returned *Error
// points into g.String().
func (g Group) Validate() error {
	var p printer
	p.pos = map[string]int{}
	p.group(g)
	if err := check(g, p.b.String(), p.pos); err != nil {
		return err
	}
	return nil
}

// check validates v, a Group or a Window, and turns the first validator
// failure in input order into an *Error at the offset recorded in pos.
func check(v any, input string, pos map[string]int) *Error {
	if validateSetupErr != nil {
		return invalidErr(input, 0, "validator setup: %v", validateSetupErr)
	}
	err := validate.Struct(v)
	if err == nil {
		return nil
	}
	var fes validator.ValidationErrors
	if !errors.As(err, &fes) {
		return invalidErr(input, 0, "%v", err)
	}
	var first *Error
	firstVague := false
	for _, fe := range fes {
		ns := fe.Namespace()
		if i := strings.IndexByte(ns, '.'); i >= 0 {
			ns = ns[i+1:] // drop the root type name
		} else {
			ns = ""
		}
		e := invalidErr(input, offset(pos, ns), "%s", reason(fe, ns))
		// "no rules" is about the whole group and sits at offset 0;
		// anything more specific is the better thing to fix first.
		vague := fe.Tag() == tagNoRules
		if first == nil || firstVague && !vague || vague == firstVague && e.Offset < first.Offset {
			first, firstVague = e, vague
		}
	}
	return first
}

// offset finds the offset of the namespace ns, or of its nearest recorded
// ancestor.
func offset(pos map[string]int, ns string) int {
	for {
		if off, ok := pos[ns]; ok {
			return off
		}
		i := strings.LastIndexAny(ns, ".[")
		if i < 0 {
			if ns == "" {
				return 0
			}
			ns = ""
			continue
		}
		ns = ns[:i]
	}
}

const nameChars = `letters, digits, "_", "-" or "."`

// reason words a validator failure. It keys on the field (the last element
// of the namespace, without index) and the failed tag, so the wording lives
// in one place for parsed and hand-built groups alike: the windows' words
// in windowReason, the other statements' in statementReason.
func reason(fe validator.FieldError, ns string) string {
	field := ns[strings.LastIndexByte(ns, '.')+1:]
	if i := strings.IndexByte(field, '['); i >= 0 {
		field = field[:i]
	}
	key := field + " " + fe.Tag()
	if r := windowReason(key, fe, fe.Value()); r != "" {
		return r
	}
	if r := statementReason(key, fe, fe.Value()); r != "" {
		return r
	}
	if r := shareReason(key, fe, fe.Value()); r != "" {
		return r
	}
	if r := sizeReason(key, fe, fe.Value()); r != "" {
		return r
	}
	return fmt.Sprintf("%s fails rule %q", ns, fe.Tag())
}

// windowReason words the failures of windows, limits, costs and grains,
// or returns "".
func windowReason(key string, fe validator.FieldError, val any) string {
	switch key {
	case "Limit min":
		return fmt.Sprintf("limit %v is below 1", val)
	case "Limit " + tagExactMax:
		return rulelimits.LimitAbove(fmt.Sprint(val), true)
	case "Limit " + tagConcMax:
		return concurrentAbove(fmt.Sprint(val))
	case "Limit " + tagBoundedMax:
		return rulelimits.LimitAbove(fmt.Sprint(val), false)
	case "LimitFunc " + tagLimitFunc:
		return fmt.Sprintf("invalid limit function name %q; want a letter, then %s", fmt.Sprint(val), nameChars)
	case "LimitFunc " + tagLimitBoth:
		return fmt.Sprintf("window has both limit %s and limit function $%v; want one", fe.Param(), val)
	case "Cost " + tagCost:
		c := fmt.Sprint(val)
		if _, constant, _ := parseCost(c); constant {
			if strings.Trim(c, "0") == "" {
				return "cost 0 is below 1"
			}
			return fmt.Sprintf("invalid cost %q; write a constant cost without leading zeros", c)
		}
		return fmt.Sprintf("invalid cost %q; want a positive integer or a cost function name: a letter, then %s", c, nameChars)
	case "Windows " + tagCostLimit:
		return fmt.Sprintf("cost %v is above the limit %s; such a request could never be admitted", val, fe.Param())
	case "Grain " + tagGrainMin:
		return fmt.Sprintf("grain %s is below %s", durValue(val), ruletime.FormatPeriod(minGrain))
	case "Grain " + tagGrainMS:
		return fmt.Sprintf("grain %s is not a whole number of milliseconds", durValue(val))
	case "Grain " + tagGrainPeriod:
		return fmt.Sprintf("grain %s is not shorter than the period %s", durValue(val), fe.Param())
	case "Grain " + tagGrainDivides:
		return fmt.Sprintf("grain %s does not divide the period %s into whole grains", durValue(val), fe.Param())
	case "Grain " + tagGrainCount:
		return fmt.Sprintf("grain %s splits the period %s grains; at most %d are allowed (a grain denies at most one grain early, so finer ones gain little and cost memory)", durValue(val), fe.Param(), maxGrains)
	case "Period min":
		return fmt.Sprintf("period %s is below %s", durValue(val), ruletime.FormatPeriod(rulelimits.MinPeriod))
	case "Period " + tagConcPeriod:
		return fmt.Sprintf("an in-flight window (N concurrent) has no period, found %s", durValue(val))
	case "LimitFunc " + tagConcFunc:
		return fmt.Sprintf("an in-flight window (N concurrent) has a number of slots, not a limit function $%v", val)
	case "Grain " + tagConcGrain:
		return fmt.Sprintf("an in-flight window (N concurrent) takes no grain, found %s", durValue(val))
	case "Windows " + tagConcOne:
		return fmt.Sprintf("a second in-flight window in rule %s; a rule has at most one N concurrent", fe.Param())
	case "Windows " + tagConcCost:
		return fmt.Sprintf("rule %s counts units of cost, not requests, so it takes no in-flight window; put N concurrent in a rule without a cost", fe.Param())
	}
	return ""
}

// statementReason words the failures of periods, blocks, kinds, names,
// roles, scopes, modes and count: items, or returns "".
func statementReason(key string, fe validator.FieldError, val any) string {
	switch key {
	case "Period max":
		return fmt.Sprintf("period %s is above %s", durValue(val), ruletime.FormatPeriod(rulelimits.MaxPeriod))
	case "Period " + tagWholeMS:
		return fmt.Sprintf("period %s is not a whole number of milliseconds", durValue(val))
	case "Block min":
		return fmt.Sprintf("block %s is below %s", durValue(val), ruletime.FormatPeriod(rulelimits.MinPeriod))
	case "Block max":
		return fmt.Sprintf("block %s is above %s", durValue(val), ruletime.FormatPeriod(rulelimits.MaxPeriod))
	case "Block " + tagWholeMS:
		return fmt.Sprintf("block %s is not a whole number of milliseconds", durValue(val))
	case "Calendar " + tagCalUnit:
		return fmt.Sprintf("unknown calendar unit %q; want day, week or month", fmt.Sprint(val))
	case "Calendar " + tagCalConc:
		return "an in-flight window (N concurrent) has no calendar period: it counts running requests"
	case "Period " + tagCalPeriod:
		return fmt.Sprintf("a calendar window has no period, found %s", durValue(val))
	case "Grain " + tagCalGrain:
		return fmt.Sprintf("a calendar window takes no grain: it counts in one counter per period, found %s", durValue(val))
	case "Windows " + tagUniqueCalendar:
		return fmt.Sprintf("duplicate calendar %v in rule %s", val, fe.Param())
	case "Calendar " + tagZone:
		_, err := ruletime.LoadZone(fmt.Sprint(val))
		return strings.TrimPrefix(fmt.Sprint(err), "rules: ")
	case "Windows " + tagDistinctWin:
		return fmt.Sprintf("rule %s counts distinct values (distinct:), which only exact sliding windows can do; window %v has a grain or a calendar period (give it its own rule with a cost, or drop the grain)", fe.Param(), val)
	case "Distinct " + tagRuleName:
		return fmt.Sprintf("invalid distinct name %q; want path or a key function name: %s", fmt.Sprint(val), nameChars)
	case "Kind required":
		return "missing rule kind"
	case "Kind oneof":
		return fmt.Sprintf("unknown kind %q", fmt.Sprint(val))
	case "Windows min":
		return "rule has no windows"
	case "Rules min":
		return "role(...)= has no rules"
	case "Role required":
		return "missing role name"
	case "Role " + tagRuleName, "Exempt " + tagRuleName:
		return fmt.Sprintf("invalid role name %q; want %s", fmt.Sprint(val), nameChars)
	case "Scope " + tagRuleName:
		return fmt.Sprintf("invalid scope name %q; want %s", fmt.Sprint(val), nameChars)
	// The parser rejects unknown mode and fail words itself, so these two
	// only speak to Go code, where Enforce and FailDefault are "".
	case "Mode oneof":
		return fmt.Sprintf("unknown mode %q; want Enforce (\"\") or Shadow", fmt.Sprint(val))
	case "Fail oneof":
		return fmt.Sprintf("unknown fail mode %q; want FailDefault (\"\"), FailOpen, FailClosed or FailLocal", fmt.Sprint(val))
	case "Name " + tagNameRequired:
		return fmt.Sprintf("kind %s needs a name, as in %s(name)", fe.Param(), fe.Param())
	case "Name " + tagNameForbidden:
		return fmt.Sprintf("kind %s takes no name", fe.Param())
	case "Name " + tagHeaderName:
		return fmt.Sprintf("invalid header name %q; want RFC 9110 token characters", fmt.Sprint(val))
	case "Name " + tagParamName:
		return fmt.Sprintf("invalid param name %q; want a Go identifier, as in a ServeMux wildcard", fmt.Sprint(val))
	case "Name " + tagKeyName:
		return fmt.Sprintf("invalid key name %q; want %s", fmt.Sprint(val), nameChars)
	case "Windows " + tagUniquePeriod:
		return fmt.Sprintf("duplicate period %s in rule %s", durValue(val), fe.Param())
	case "Rules " + tagUniqueRule:
		return fmt.Sprintf("duplicate rule %s; put all its windows in one rule", fe.Param())
	case "Role " + tagUniqueRole:
		return fmt.Sprintf("duplicate role(%s)=", fe.Param())
	case "Exempt " + tagUniqueExempt:
		return fmt.Sprintf("duplicate exempt role %q", fe.Param())
	case "Exempt " + tagExemptAndRules:
		return fmt.Sprintf("role %q is both exempt and given role rules", fe.Param())
	case "Count " + tagStatus:
		return fmt.Sprintf("invalid status %q in count; want a code 100..599 or a class 1xx..5xx", fmt.Sprint(val))
	case "Count " + tagUniqueCount:
		return fmt.Sprintf("duplicate status %s in count", fe.Param())
	case "Count " + tagCountClass:
		return fmt.Sprintf("status %v is already counted by class %s", val, fe.Param())
	case "Rules " + tagNoRules:
		return "rule group has no rules"
	}
	return ""
}

func durValue(v any) string {
	if d, ok := v.(time.Duration); ok {
		return ruletime.FormatPeriod(d)
	}
	return fmt.Sprint(v)
}
