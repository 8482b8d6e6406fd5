package rules

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/internal/ruletime"
)

// units maps the unit words of the grammar to their length.
var units = map[string]time.Duration{
	"ms":   time.Millisecond,
	"s":    time.Second,
	"sec":  time.Second,
	"m":    time.Minute,
	"min":  time.Minute,
	"h":    time.Hour,
	"hour": time.Hour,
	"d":    24 * time.Hour,
	"day":  24 * time.Hour,
}

// fineUnits are not part of the grammar. They are recognised only so that
// "1/500us" is reported as a period below the minimum rather than as a
// mystery unit.
var fineUnits = map[string]time.Duration{
	"us": time.Microsecond,
	"µs": time.Microsecond, // U+00B5 MICRO SIGN, as time.Duration prints it
	"μs": time.Microsecond, // U+03BC GREEK SMALL LETTER MU
	"ns": time.Nanosecond,
}

var kinds = map[string]Kind{
	string(IP):     IP,
	string(User):   User,
	string(Global): Global,
	string(Header): Header,
	string(Param):  Param,
	string(Key):    Key,
}

// Parse parses a rule group written in the rule language described in the
// package documentation, and validates it as Group.Validate does. Errors are
// of type *Error; Error.Syntax tells a text that does not match the
// grammar from one that breaks a rule.
func Parse(s string) (Group, error) {
	g, _, err := parse(s)
	if err != nil {
		return Group{}, err
	}
	return g, nil
}

// MustParse is like Parse but panics if s is not a valid rule group. It is
// meant for package-level variables initialised from constant text.
func MustParse(s string) Group {
	g, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return g
}

// parseWindow parses and validates a single window such as "10/30s" or
// "20000/d~15min".
//
// A bare window is checked as the window of a rule without a cost, so an
// exact window is capped at 100,000 and one with a grain at 2^50.
func parseWindow(s string) (Window, error) {
	p := parser{s: s, pos: map[string]int{"": 0}}
	p.space()
	w, err := p.window("Windows[0]", false)
	if err == nil {
		p.space()
		if !p.eof() {
			err = syntaxErr(s, p.i, "expected end of window, found %s", p.found())
		}
	}
	if err == nil {
		err = check(Rule{Kind: Global, Windows: []Window{w}}, s, p.pos)
	}
	if err != nil {
		return Window{}, err
	}
	return w, nil
}

// parse returns, besides the group, the offset of every element keyed by
// validator namespace; Routes needs them to point at param names.
func parse(s string) (Group, map[string]int, *Error) {
	p := parser{s: s, pos: map[string]int{"": 0}}
	if err := p.group(); err != nil {
		return Group{}, nil, err
	}
	if err := check(p.g, s, p.pos); err != nil {
		return Group{}, nil, err
	}
	return p.g, p.pos, nil
}

// parser is a hand-written recursive-descent parser over bytes. Names are
// read as maximal runs up to the next delimiter and checked by the
// validator afterwards, so a bad character is reported as a bad name, not
// as a confusing syntax error further on.
type parser struct {
	s   string
	i   int
	pos map[string]int // validator namespace → offset in s
	g   Group

	seenScope, seenMode, seenFail, seenCount, seenBlock bool
	seenCalendar, seenDistinct, seenRegions             bool
}

func (p *parser) eof() bool { return p.i >= len(p.s) }

func (p *parser) peek() byte {
	if p.eof() {
		return 0
	}
	return p.s[p.i]
}

func (p *parser) space() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// found describes the next character for "expected X, found Y" messages.
func (p *parser) found() string {
	if p.eof() {
		return "end of input"
	}
	r, n := utf8.DecodeRuneInString(p.s[p.i:])
	if r == utf8.RuneError && n == 1 {
		return strconv.Quote(p.s[p.i : p.i+1])
	}
	return strconv.Quote(string(r))
}

func (p *parser) expect(c byte, after string) *Error {
	p.space()
	if p.peek() != c {
		return syntaxErr(p.s, p.i, "expected %q after %s, found %s", string(c), after, p.found())
	}
	p.i++
	return nil
}

// run returns the longest run of bytes at the cursor satisfying ok.
func (p *parser) run(ok func(byte) bool) string {
	start := p.i
	for !p.eof() && ok(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isWord(c byte) bool   { return isLetter(c) || isDigit(c) || c == '_' }

// isUnit accepts non-ASCII bytes so that "µs" and other stray letters end
// up in one unit word and get a precise message.
func isUnit(c byte) bool { return isLetter(c) || c >= utf8.RuneSelf }

// parenStop ends a name in parentheses early at bytes no name may
// contain, so that "header(a:5/s" reports the missing ")" where it belongs.
const parenStop = "();:,="

// costStop does the same for a cost in brackets.
const costStop = "[]();:,="

// limitStop ends the name of a limit function, as in $quota/min.
const limitStop = "/~[]();:,=&"

// canonicalCost drops the leading zeros of a constant cost, so that ip[05]
// and ip[5] are one rule; a cost of only zeros becomes "0", which
// validation rejects. Names are returned unchanged.
func canonicalCost(c string) string {
	for i := 0; i < len(c); i++ {
		if !isDigit(c[i]) {
			return c
		}
	}
	if t := strings.TrimLeft(c, "0"); t != "" {
		return t
	}
	return "0"
}

// name reads a name: everything up to white space or one of the stop
// bytes. Its characters are the validator's business.
func (p *parser) name(stop string) string {
	return p.run(func(c byte) bool {
		if c == ' ' || c == '\t' {
			return false
		}
		for i := 0; i < len(stop); i++ {
			if c == stop[i] {
				return false
			}
		}
		return true
	})
}

func (p *parser) group() *Error {
	p.space()
	if p.eof() {
		return syntaxErr(p.s, p.i, "empty rule group")
	}
	for {
		if p.peek() == ';' {
			return syntaxErr(p.s, p.i, "empty statement")
		}
		follow, err := p.statement()
		if err != nil {
			return err
		}
		p.space()
		if p.eof() {
			return nil
		}
		if p.peek() != ';' {
			return syntaxErr(p.s, p.i, "expected %s, found %s", follow, p.found())
		}
		p.i++
		p.space()
		if p.eof() {
			return nil // one trailing ";" is allowed
		}
	}
}

// statement parses one statement and returns what may follow it, for the
// caller's error message.
func (p *parser) statement() (follow string, err *Error) {
	start := p.i
	word := p.run(isWord)
	switch word {
	case "":
		return "", syntaxErr(p.s, start, "expected a rule kind or keyword, found %s", p.found())
	case "exempt":
		return `"," or ";"`, p.exempt()
	case "role":
		return `",", "&" or ";"`, p.roleRules(start)
	case "scope":
		return `";"`, p.scope(start)
	case "count":
		return `"," or ";"`, p.count(start)
	case "mode":
		return `";"`, p.mode(start)
	case "fail":
		return `";"`, p.fail(start)
	case "block":
		return `";"`, p.block(start)
	case calendarWord:
		return `";"`, p.calendarStatement(start)
	case "distinct":
		return `";"`, p.distinctStatement(start)
	case regionsWord:
		return `";"`, p.regions(start)
	case shareWord:
		return `";"`, p.share(start)
	}
	k, ok := kinds[word]
	if !ok {
		return "", syntaxErr(p.s, start, "unknown kind or keyword %q", word)
	}
	ns := "Rules[" + strconv.Itoa(len(p.g.Rules)) + "]"
	l, err := p.rule(k, start, ns)
	if err != nil {
		return "", err
	}
	p.g.Rules = append(p.g.Rules, l)
	return `"," or ";"`, nil
}

// windowAt records where the fields of window ns are in the text, for
// errors: the window and its limit at start, its period and grain at
// periodAt.
func (p *parser) windowAt(ns string, start, periodAt int) {
	p.pos[ns] = start
	p.pos[join(ns, "Limit")] = start
	p.pos[join(ns, "LimitFunc")] = start
	p.pos[join(ns, "Period")] = periodAt
	p.pos[join(ns, "Grain")] = periodAt
}

// rule parses the rest of a rule whose kind word, at start, has been
// read.
func (p *parser) rule(k Kind, start int, ns string) (Rule, *Error) {
	p.pos[ns] = start
	p.pos[ns+".Kind"] = start
	p.pos[ns+".Name"] = start
	l := Rule{Kind: k}
	p.space()
	if p.peek() == '(' {
		p.i++
		p.space()
		nameAt := p.i
		l.Name = p.name(parenStop)
		if l.Name == "" {
			return Rule{}, syntaxErr(p.s, p.i, "expected a name after %q, found %s", string(k)+"(", p.found())
		}
		if k == Header {
			l.Name = http.CanonicalHeaderKey(l.Name)
		}
		p.pos[ns+".Name"] = nameAt
		if err := p.expect(')', "the name"); err != nil {
			return Rule{}, err
		}
		p.space()
	}
	p.pos[ns+".Cost"] = start
	if p.peek() == '[' {
		p.i++
		p.space()
		costAt := p.i
		l.Cost = p.name(costStop)
		if l.Cost == "" {
			return Rule{}, syntaxErr(p.s, p.i, "expected a cost function name or a positive integer after %q, found %s", l.ID()+"[", p.found())
		}
		l.Cost = canonicalCost(l.Cost)
		p.pos[ns+".Cost"] = costAt
		if err := p.expect(']', "the cost"); err != nil {
			return Rule{}, err
		}
	}
	if err := p.expect(':', strconv.Quote(l.ID())); err != nil {
		return Rule{}, err
	}
	p.pos[ns+".Windows"] = p.i
	for {
		p.space()
		w, err := p.window(ns+".Windows["+strconv.Itoa(len(l.Windows))+"]", l.Cost != "")
		if err != nil {
			return Rule{}, err
		}
		l.Windows = append(l.Windows, w)
		p.space()
		if p.peek() != ',' {
			return l, nil
		}
		p.i++
	}
}

// limitSuffixes are the multipliers a limit may carry: "" for none, SI
// (k is lower case, as in kilo) and binary.
var limitSuffixes = map[string]int64{
	"":  1,
	"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
}

// window parses LIMIT/[COUNT]UNIT[~[COUNT]UNIT]. Overflow is reported here,
// in the words the validator would use, because an overflowed number cannot
// be stored for the validator to see; costed says whether the window's
// rule has a cost, which decides the cap the message names.
func (p *parser) window(ns string, costed bool) (Window, *Error) {
	start := p.i
	if p.peek() == '$' {
		return p.dynamicWindow(ns, start)
	}
	digits := p.run(isDigit)
	if digits == "" {
		return Window{}, syntaxErr(p.s, p.i, "expected a limit, found %s", p.found())
	}
	suffixAt := p.i
	suffix := p.run(isLetter)
	mult, ok := limitSuffixes[suffix]
	if !ok {
		mult = 1 // maybe "3concurrent"; reported below otherwise
	}
	limit, err := strconv.ParseInt(digits, 10, 64)
	overflow := err != nil || limit > math.MaxInt64/mult
	limit *= mult
	if w, found, err := p.concurrent(ns, start, suffix, suffixAt); found || err != nil {
		if err != nil {
			return Window{}, err
		}
		if overflow {
			return Window{}, invalidErr(p.s, start, "%s", concurrentAbove(digits+suffix))
		}
		w.Limit = limit
		return w, nil
	}
	if !ok {
		return Window{}, syntaxErr(p.s, suffixAt, "unknown limit suffix %q; want k, M, G, T (×1000) or Ki, Mi, Gi, Ti (×1024)", suffix)
	}
	w, perr := p.windowSpan(ns, start)
	if perr != nil {
		return Window{}, perr
	}
	w.Limit = limit
	if overflow {
		return Window{}, invalidErr(p.s, start, "%s", rulelimits.LimitAbove(digits+suffix, w.Grain == 0 && w.Calendar == "" && !costed))
	}
	return w, nil
}

// dynamicWindow parses $NAME/[COUNT]UNIT[~[COUNT]UNIT], a window whose
// limit comes from a limit function; the validator checks the name.
func (p *parser) dynamicWindow(ns string, start int) (Window, *Error) {
	p.i++ // '$'
	name := p.name(limitStop)
	if name == "" {
		return Window{}, syntaxErr(p.s, p.i, "expected a limit function name after \"$\", found %s", p.found())
	}
	w, err := p.windowSpan(ns, start)
	if err != nil {
		return Window{}, err
	}
	w.LimitFunc = name
	return w, nil
}

// windowSpan parses the rest of a window after its limit, at start:
// /[COUNT]UNIT[~[COUNT]UNIT].
func (p *parser) windowSpan(ns string, start int) (Window, *Error) {
	if err := p.expect('/', "the limit"); err != nil {
		return Window{}, err
	}
	p.space()
	periodAt := p.i
	if strings.HasPrefix(p.s[p.i:], calendarWord) && (len(p.s) == p.i+len(calendarWord) || !isUnit(p.s[p.i+len(calendarWord)])) {
		p.i += len(calendarWord)
		return p.calendarSpan(ns, start, periodAt)
	}
	period, perr := p.duration("period", rulelimits.MinPeriod, func(count, unit string) string {
		return fmt.Sprintf("period %s%s is above %s", count, unit, ruletime.FormatPeriod(rulelimits.MaxPeriod))
	})
	if perr != nil {
		return Window{}, perr
	}
	w := Window{Period: period}
	p.windowAt(ns, start, periodAt)
	p.space()
	if p.peek() == '~' {
		p.i++
		p.space()
		grainAt := p.i
		p.pos[join(ns, "Grain")] = grainAt
		grain, gerr := p.duration("grain", minGrain, func(count, unit string) string {
			return fmt.Sprintf("grain %s%s is not shorter than the period %s", count, unit, ruletime.FormatPeriod(period))
		})
		if gerr != nil {
			return Window{}, gerr
		}
		if grain == 0 {
			// The zero Grain means an exact window; a written grain of 0
			// is a mistake, not a way to say "exact".
			return Window{}, invalidErr(p.s, grainAt, "grain 0s is below %s", ruletime.FormatPeriod(minGrain))
		}
		w.Grain = grain
	}
	return w, nil
}

// concurrentWord is the window item of an in-flight window, "N concurrent".
const concurrentWord = "concurrent"

// concurrent reads the word of an in-flight window after its limit (which
// starts at start; suffix is what followed its digits, at suffixAt, and
// may be the word itself, as in "3concurrent"), recording the window's
// offsets under ns. It reports found false, and reads nothing, when no
// such word follows.
func (p *parser) concurrent(ns string, start int, suffix string, suffixAt int) (w Window, found bool, err *Error) {
	wordAt := suffixAt
	if suffix != concurrentWord {
		if _, ok := limitSuffixes[suffix]; !ok {
			return Window{}, false, nil
		}
		i := p.i
		p.space()
		wordAt = p.i
		if p.run(isLetter) != concurrentWord {
			p.i = i
			return Window{}, false, nil
		}
	}
	p.windowAt(ns, start, wordAt)
	p.space()
	switch p.peek() {
	case '~':
		return Window{}, false, invalidErr(p.s, p.i, "an in-flight window (N concurrent) takes no grain")
	case '/':
		if rest := strings.TrimLeft(p.s[p.i+1:], " \t"); strings.HasPrefix(rest, calendarWord) {
			return Window{}, false, invalidErr(p.s, p.i, "an in-flight window (N concurrent) has no calendar period: it counts running requests")
		}
		return Window{}, false, invalidErr(p.s, p.i, "an in-flight window (N concurrent) has no period")
	}
	return Window{Concurrent: true}, true, nil
}

// concurrentAbove words the limit of an in-flight window above its cap.
func concurrentAbove(limit string) string {
	return fmt.Sprintf("limit %s is above %d, the most slots an in-flight window may hold", limit, rulelimits.MaxLimit)
}

// duration parses [COUNT]UNIT, the period or grain of a window, named by
// what in messages. Counts below min in the fine units are reported as
// such, overflow with the message above returns.
func (p *parser) duration(what string, min time.Duration, above func(count, unit string) string) (time.Duration, *Error) {
	at := p.i
	countText := p.run(isDigit)
	p.space()
	unitAt := p.i
	unit := p.run(isUnit)
	if unit == "" {
		return 0, syntaxErr(p.s, p.i, "expected a unit, found %s", p.found())
	}
	count := int64(1)
	if countText != "" {
		var err error
		if count, err = strconv.ParseInt(countText, 10, 64); err != nil {
			count = math.MaxInt64 // only range errors are possible for a digit run
		}
	}
	size, ok := units[unit]
	if !ok {
		fine, isFine := fineUnits[unit]
		if !isFine {
			return 0, syntaxErr(p.s, unitAt, "unknown unit %q", unit)
		}
		if count < int64(min/fine) {
			return 0, invalidErr(p.s, at, "%s %s%s is below %s", what, countOr1(countText), unit, ruletime.FormatPeriod(min))
		}
		return 0, syntaxErr(p.s, unitAt, "unsupported unit %q; %ss are whole milliseconds", unit, what)
	}
	if count > int64(math.MaxInt64/size) {
		return 0, invalidErr(p.s, at, "%s", above(countOr1(countText), unit))
	}
	return time.Duration(count) * size, nil
}

// join appends a field to a namespace; parseWindow validates a bare
// Window, whose fields have no prefix.
func join(ns, field string) string {
	if ns == "" {
		return field
	}
	return ns + "." + field
}

func countOr1(s string) string {
	if s == "" {
		return "1"
	}
	return s
}

func (p *parser) exempt() *Error {
	if err := p.expect(':', `"exempt"`); err != nil {
		return err
	}
	return p.list("Exempt", &p.g.Exempt, "a role name", func() string { return p.name(",;") })
}

// list reads the comma-separated items of an exempt: or count: statement
// with read into *items, recording their offsets under field.
func (p *parser) list(field string, items *[]string, what string, read func() string) *Error {
	for {
		p.space()
		at := p.i
		item := read()
		if item == "" {
			return syntaxErr(p.s, p.i, "expected %s, found %s", what, p.found())
		}
		p.pos[field+"["+strconv.Itoa(len(*items))+"]"] = at
		*items = append(*items, item)
		p.space()
		if p.peek() != ',' {
			return nil
		}
		p.i++
	}
}

func (p *parser) roleRules(start int) *Error {
	ns := "RoleRules[" + strconv.Itoa(len(p.g.RoleRules)) + "]"
	p.pos[ns] = start
	if err := p.expect('(', `"role"`); err != nil {
		return err
	}
	p.space()
	at := p.i
	o := RoleRules{Role: p.name(parenStop)}
	if o.Role == "" {
		return syntaxErr(p.s, p.i, "expected a role name, found %s", p.found())
	}
	p.pos[ns+".Role"] = at
	if err := p.expect(')', "the role name"); err != nil {
		return err
	}
	if err := p.expect('=', strconv.Quote("role("+o.Role+")")); err != nil {
		return err
	}
	p.pos[ns+".Rules"] = p.i
	for {
		p.space()
		if len(o.Rules) == 0 && (p.eof() || p.peek() == ';') {
			return syntaxErr(p.s, p.i, "role(%s)= has no rules", o.Role)
		}
		kindAt := p.i
		word := p.run(isWord)
		if word == "" {
			return syntaxErr(p.s, kindAt, "expected a rule kind, found %s", p.found())
		}
		k, ok := kinds[word]
		if !ok {
			return syntaxErr(p.s, kindAt, "unknown kind %q", word)
		}
		l, err := p.rule(k, kindAt, ns+".Rules["+strconv.Itoa(len(o.Rules))+"]")
		if err != nil {
			return err
		}
		o.Rules = append(o.Rules, l)
		p.space()
		if p.peek() != '&' {
			p.g.RoleRules = append(p.g.RoleRules, o)
			return nil
		}
		p.i++
	}
}

// count parses the items of a count: statement; validation checks them,
// so that a hand-built Group gets the same messages.
func (p *parser) count(start int) *Error {
	if p.seenCount {
		return invalidErr(p.s, start, "duplicate count statement")
	}
	p.seenCount = true
	if err := p.expect(':', `"count"`); err != nil {
		return err
	}
	return p.list("Count", &p.g.Count, "a status code or class such as 401 or 4xx", func() string { return p.run(isWord) })
}

func (p *parser) scope(start int) *Error {
	return p.nameStatement(start, "scope", "Scope", "a scope name", "", &p.seenScope, &p.g.Scope)
}

// nameStatement parses the rest of a statement kw:NAME whose keyword is at
// start (scope, calendar, distinct) into *dst, recording NAME's offset
// under field; what names NAME in a syntax error, dup adds to the error of
// a second statement, which seen detects.
func (p *parser) nameStatement(start int, kw, field, what, dup string, seen *bool, dst *string) *Error {
	if *seen {
		return invalidErr(p.s, start, "duplicate %s statement%s", kw, dup)
	}
	*seen = true
	if err := p.expect(':', strconv.Quote(kw)); err != nil {
		return err
	}
	p.space()
	at := p.i
	*dst = p.name(";")
	if *dst == "" {
		return syntaxErr(p.s, p.i, "expected %s, found %s", what, p.found())
	}
	p.pos[field] = at
	return nil
}

// keyword reads the value of a mode: or fail: statement, returning its
// offset.
func (p *parser) keyword(kw, noun string) (string, int, *Error) {
	if err := p.expect(':', strconv.Quote(kw)); err != nil {
		return "", 0, err
	}
	p.space()
	at := p.i
	word := p.run(isWord)
	if word == "" {
		return "", 0, syntaxErr(p.s, at, "expected a %s after %q, found %s", noun, kw+":", p.found())
	}
	return word, at, nil
}

func (p *parser) mode(start int) *Error {
	if p.seenMode {
		return invalidErr(p.s, start, "duplicate mode statement")
	}
	p.seenMode = true
	word, at, err := p.keyword("mode", "mode")
	if err != nil {
		return err
	}
	switch word {
	case "enforce":
		p.g.Mode = Enforce
	case "shadow":
		p.g.Mode = Shadow
	default:
		return syntaxErr(p.s, at, "unknown mode %q; want enforce or shadow", word)
	}
	p.pos["Mode"] = at
	return nil
}

func (p *parser) fail(start int) *Error {
	if p.seenFail {
		return invalidErr(p.s, start, "duplicate fail statement")
	}
	p.seenFail = true
	word, at, err := p.keyword("fail", "fail mode")
	if err != nil {
		return err
	}
	switch FailMode(word) {
	case FailOpen, FailClosed, FailLocal:
		p.g.Fail = FailMode(word)
	default:
		return syntaxErr(p.s, at, "unknown fail mode %q; want open, closed or local", word)
	}
	p.pos["Fail"] = at
	return nil
}

func (p *parser) block(start int) *Error {
	if p.seenBlock {
		return invalidErr(p.s, start, "duplicate block statement")
	}
	p.seenBlock = true
	if err := p.expect(':', `"block"`); err != nil {
		return err
	}
	p.space()
	at := p.i
	d, err := p.duration("block", rulelimits.MinPeriod, func(count, unit string) string {
		return fmt.Sprintf("block %s%s is above %s", count, unit, ruletime.FormatPeriod(rulelimits.MaxPeriod))
	})
	if err != nil {
		return err
	}
	if d == 0 {
		// The zero Block means no block; a written block of 0 is a
		// mistake, not a way to say "none".
		return invalidErr(p.s, at, "block 0s is below %s", ruletime.FormatPeriod(rulelimits.MinPeriod))
	}
	p.g.Block = d
	p.pos["Block"] = at
	return nil
}
