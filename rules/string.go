package rules

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/internal/ruletime"
)

// periodText is the canonical period of a window: the largest unit dividing
// p, with a count of 1 left out ("s", "30s", "90min"). Periods the grammar
// cannot express (not positive, or not whole milliseconds) fall back to
// time.Duration's text so that invalid hand-built groups still print
// something recognisable.
func periodText(p time.Duration) string {
	n, unit, ok := ruletime.SplitPeriod(p)
	if !ok {
		return p.String()
	}
	if n == 1 {
		return unit
	}
	return strconv.FormatInt(n, 10) + unit
}

// String returns the window in canonical form, such as "5/s", "10/30s",
// "1/90min", "20000/d~15min" or, for an in-flight window, "3 concurrent".
func (w Window) String() string {
	var p printer
	p.window("", w)
	return p.b.String()
}

// ID returns the identity of the rule: its kind, followed for named kinds
// by the name in parentheses and for a rule with a cost by the cost in
// brackets, as in "ip", "header(X-Api-Key)", "user[bytes]" or
// "key(account)[5]". Two rules with the same ID in one list would count
// the same subject twice, so validation rejects that; rules that differ
// only in their cost count different things and may share a list.
func (l Rule) ID() string {
	id := string(l.Kind)
	if l.Kind.named() || l.Name != "" {
		id += "(" + l.canonicalName() + ")"
	}
	if l.Cost != "" {
		id += "[" + l.Cost + "]"
	}
	return id
}

// canonicalName folds header names to their canonical MIME form because
// header lookups ignore case; other names are case-sensitive.
func (l Rule) canonicalName() string {
	if l.Kind == Header {
		return http.CanonicalHeaderKey(l.Name)
	}
	return l.Name
}

// String returns the rule in canonical form, such as "ip:5/s,100/min".
func (l Rule) String() string {
	var p printer
	p.rule("", l)
	return p.b.String()
}

// String returns the role rules in canonical form, such as
// "role(admin)=ip:30/min & global:1000/h".
func (o RoleRules) String() string {
	var p printer
	p.roleRules("", o)
	return p.b.String()
}

// String returns the group in canonical form: rules, role rules, exempt,
// scope, mode, fail, block, calendar, distinct, regions and share statements in
// that order, joined by "; ". For every
// group g returned by Parse, Parse(g.String()) returns a group equal to g.
func (g Group) String() string {
	var p printer
	p.group(g)
	return p.b.String()
}

// printer renders canonical text and, when pos is not nil, records the
// offset of every element under the validator namespace that names it, so
// that Validate can point into the text it validates.
type printer struct {
	b   strings.Builder
	pos map[string]int
}

func (p *printer) mark(key string) {
	if p.pos != nil {
		p.pos[key] = p.b.Len()
	}
}

func (p *printer) window(ns string, w Window) {
	p.mark(ns)
	p.mark(join(ns, "Limit"))
	p.mark(join(ns, "LimitFunc"))
	if w.LimitFunc != "" {
		p.b.WriteByte('$')
		p.b.WriteString(w.LimitFunc)
	} else {
		p.b.WriteString(strconv.FormatInt(w.Limit, 10))
	}
	if w.Calendar != "" && !w.Concurrent {
		p.b.WriteByte('/')
		p.mark(join(ns, "Period"))
		p.mark(join(ns, "Grain"))
		p.b.WriteString(calendarWord + " ")
		p.mark(join(ns, "Calendar"))
		p.b.WriteString(string(w.Calendar))
		return
	}
	if w.Concurrent {
		p.b.WriteByte(' ')
		p.mark(join(ns, "Period"))
		p.mark(join(ns, "Grain"))
		p.b.WriteString(concurrentWord)
		return
	}
	p.b.WriteByte('/')
	p.mark(join(ns, "Period"))
	p.mark(join(ns, "Grain"))
	p.b.WriteString(periodText(w.Period))
	if w.Grain != 0 {
		p.b.WriteByte('~')
		p.mark(join(ns, "Grain"))
		p.b.WriteString(periodText(w.Grain))
	}
}

func (p *printer) rule(ns string, l Rule) {
	p.mark(ns)
	p.mark(ns + ".Kind")
	p.mark(ns + ".Name")
	p.b.WriteString(string(l.Kind))
	if l.Kind.named() || l.Name != "" {
		p.b.WriteByte('(')
		p.mark(ns + ".Name")
		p.b.WriteString(l.canonicalName())
		p.b.WriteByte(')')
	}
	p.mark(ns + ".Cost")
	if l.Cost != "" {
		p.b.WriteByte('[')
		p.mark(ns + ".Cost")
		p.b.WriteString(l.Cost)
		p.b.WriteByte(']')
	}
	p.b.WriteByte(':')
	p.mark(ns + ".Windows")
	for i, w := range l.Windows {
		if i > 0 {
			p.b.WriteByte(',')
		}
		p.window(ns+".Windows["+strconv.Itoa(i)+"]", w)
	}
}

func (p *printer) rules(ns string, ls []Rule, sep string) {
	p.mark(ns)
	for i, l := range ls {
		if i > 0 {
			p.b.WriteString(sep)
		}
		p.rule(ns+"["+strconv.Itoa(i)+"]", l)
	}
}

func (p *printer) roleRules(ns string, o RoleRules) {
	p.mark(ns)
	p.b.WriteString("role(")
	p.mark(ns + ".Role")
	p.b.WriteString(o.Role)
	p.b.WriteString(")=")
	p.rules(ns+".Rules", o.Rules, " & ")
}

// list prints a statement of comma-separated items, marking each under
// field.
func (p *printer) list(keyword, field string, items []string) {
	p.b.WriteString(keyword)
	for i, it := range items {
		if i > 0 {
			p.b.WriteByte(',')
		}
		p.mark(field + "[" + strconv.Itoa(i) + "]")
		p.b.WriteString(it)
	}
}

func (p *printer) group(g Group) {
	p.mark("")
	sep := func() {
		if p.b.Len() > 0 {
			p.b.WriteString("; ")
		}
	}
	for i, l := range g.Rules {
		sep()
		p.rule("Rules["+strconv.Itoa(i)+"]", l)
	}
	for i, rr := range g.RoleRules {
		sep()
		p.roleRules("RoleRules["+strconv.Itoa(i)+"]", rr)
	}
	if len(g.Exempt) > 0 {
		sep()
		p.list("exempt:", "Exempt", g.Exempt)
	}
	if len(g.Count) > 0 {
		sep()
		p.list("count:", "Count", g.Count)
	}
	if g.Scope != "" {
		sep()
		p.b.WriteString("scope:")
		p.mark("Scope")
		p.b.WriteString(g.Scope)
	}
	if g.Mode != Enforce {
		sep()
		p.b.WriteString("mode:")
		p.mark("Mode")
		p.b.WriteString(string(g.Mode))
	}
	if g.Fail != FailDefault {
		sep()
		p.b.WriteString("fail:")
		p.mark("Fail")
		p.b.WriteString(string(g.Fail))
	}
	if g.Block != 0 {
		sep()
		p.b.WriteString("block:")
		p.mark("Block")
		p.b.WriteString(periodText(g.Block))
	}
	if g.Calendar != "" {
		sep()
		p.b.WriteString(calendarWord + ":")
		p.mark("Calendar")
		p.b.WriteString(g.Calendar)
	}
	if g.Distinct != "" {
		sep()
		p.b.WriteString("distinct:")
		p.mark("Distinct")
		p.b.WriteString(g.Distinct)
	}
	if g.Regional {
		sep()
		p.b.WriteString(regionsWord + ":")
		p.mark("Regional")
		p.b.WriteString(regionsLocal)
	}
	for i, s := range g.Shares {
		sep()
		ns := "Shares[" + strconv.Itoa(i) + "]"
		p.mark(ns)
		p.b.WriteString(shareWord + "(")
		p.mark(ns + ".Class")
		p.b.WriteString(s.Class)
		p.b.WriteString("):")
		p.mark(ns + ".Percent")
		p.b.WriteString(strconv.Itoa(s.Percent) + "%")
	}
}
