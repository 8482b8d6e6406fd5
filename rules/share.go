package rules

import (
	"fmt"
	"strconv"

	"github.com/go-playground/validator/v10"
)

// shareWord is the keyword of the share(CLASS):P% statement.
const shareWord = "share"

// Share reserves part of a throttle's admissions for one class of calls:
// the statement share(CLASS):P%, as in share(critical):30%. While calls of
// several classes wait, calls of Class get at least Percent percent of
// the admissions; a share nobody uses is lent to the others. Only
// throttles take shares: a route's group with one is refused.
type Share struct {
	// Class names the class, spelled like a role name.
	Class string `validate:"required,rulename"`
	// Percent is the class's share, a whole percent from 1 to 100. The
	// shares of a group add up to at most 100.
	Percent int `validate:"min=1,max=100"`
}

// String returns the statement in canonical form, such as
// "share(critical):30%".
func (s Share) String() string {
	return shareWord + "(" + s.Class + "):" + strconv.Itoa(s.Percent) + "%"
}

// share parses the rest of a share(CLASS):P% statement whose keyword is
// at start.
func (p *parser) share(start int) *Error {
	ns := "Shares[" + strconv.Itoa(len(p.g.Shares)) + "]"
	p.pos[ns] = start
	if err := p.expect('(', strconv.Quote(shareWord)); err != nil {
		return err
	}
	p.space()
	at := p.i
	s := Share{Class: p.name(parenStop)}
	if s.Class == "" {
		return syntaxErr(p.s, p.i, "expected a class name, found %s", p.found())
	}
	p.pos[ns+".Class"] = at
	if err := p.expect(')', "the class name"); err != nil {
		return err
	}
	if err := p.expect(':', strconv.Quote(shareWord+"("+s.Class+")")); err != nil {
		return err
	}
	p.space()
	at = p.i
	digits := p.run(isDigit)
	if digits == "" {
		return syntaxErr(p.s, p.i, "expected a percent such as 30%%, found %s", p.found())
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n > 100 {
		return invalidErr(p.s, at, "share %s%% is above 100%%", digits)
	}
	s.Percent = n
	p.pos[ns+".Percent"] = at
	if err := p.expect('%', "the percent"); err != nil {
		return err
	}
	p.g.Shares = append(p.g.Shares, s)
	return nil
}

// sharesLevel reports a class shared twice and the share that takes the
// sum above 100%.
func sharesLevel(sl validator.StructLevel, g Group) {
	seen := make(map[string]bool, len(g.Shares))
	sum := 0
	for i, s := range g.Shares {
		name := "Shares[" + strconv.Itoa(i) + "]"
		if seen[s.Class] {
			sl.ReportError(s.Class, name+".Class", name+".Class", tagUniqueShare, s.Class)
		}
		seen[s.Class] = true
		if s.Percent < 1 || s.Percent > 100 {
			continue // reported by the field's own tag
		}
		sum += s.Percent
		if sum > 100 && sum-s.Percent <= 100 {
			sl.ReportError(s.Percent, name+".Percent", name+".Percent", tagShareSum, strconv.Itoa(sum))
		}
	}
}

// shareReason words the failures of share statements, or returns "".
func shareReason(key string, fe validator.FieldError, val any) string {
	switch key {
	case "Class required":
		return "missing class name in share(CLASS)"
	case "Class " + tagRuleName:
		return "invalid class name " + strconv.Quote(fmt.Sprint(val)) + "; want " + nameChars
	case "Class " + tagUniqueShare:
		return "duplicate share(" + fe.Param() + ")"
	case "Percent min":
		return "share " + fmt.Sprint(val) + "% is below 1%"
	case "Percent max":
		return "share " + fmt.Sprint(val) + "% is above 100%"
	case "Percent " + tagShareSum:
		return "shares add up to " + fe.Param() + "%, above 100%"
	}
	return ""
}
