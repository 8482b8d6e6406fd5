package rules

import (
	"fmt"
	"strconv"
	"strings"
)

// Error describes a problem in a rule group or in the struct tags that
// declare one.
//
// Its text is, with the optional parts in brackets:
//
//	rules: [Type[.Field]: ][tag Tag: ]"Input": Reason at offset Offset
//
// for example
//
//	rules: "3/fortnight": unknown unit "fortnight" at offset 2
//	rules: main.Handlers.Files: tag limit: "ip:0/s": limit 0 is below 1 at offset 3
//
// When the problem is not located in a text (a nil handler, say) Offset is
// negative and the quoted input and offset are left out.
type Error struct {
	// Input is the text that was parsed: the argument of Parse, the value
	// of a struct tag, or for Group.Validate the canonical text of the
	// group.
	Input string
	// Offset is the byte offset in Input of the offending token, or -1.
	Offset int
	// Reason says what is wrong, in lower case.
	Reason string
	// Type is the struct type whose tags declared the rule, as printed by
	// reflect.Type.String, or empty outside Routes.
	Type string
	// Field is the struct field whose tags declared the rule. Promoted
	// fields are named by their path, as in Admin.Files.
	Field string
	// Tag is the struct tag key ("limit" or "route") whose value is Input,
	// or empty.
	Tag string
	// Syntax reports that Input does not match the grammar; otherwise it
	// parses but breaks a rule of the model (a limit or period out of
	// range, a duplicate, a bad name) or is a struct tag that cannot be
	// served.
	Syntax bool

	// ns and token, set when Input is a group's canonical form, name the
	// offending element (its validator namespace) and its text, so that
	// Relocate can find it in the group as written.
	ns, token string
}

// Relocate returns e pointing into text, the group as the user wrote it,
// when e points into the group's canonical form (as Group.CheckRoles's
// errors do). Statements may be written in any order. Otherwise it
// returns e.
func (e *Error) Relocate(text string) *Error {
	if e == nil || e.ns == "" {
		return e
	}
	// Syntax only: a dialect's count items need not be HTTP statuses.
	p := parser{s: text, pos: map[string]int{"": 0}}
	if p.group() != nil {
		return e
	}
	at, ok := p.pos[e.ns]
	if !ok || !strings.HasPrefix(text[at:], e.token) {
		return e // text is not a spelling of e's group
	}
	c := *e
	c.Input, c.Offset, c.ns, c.token = text, at, "", ""
	return &c
}

// Error implements the error interface.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("rules: ")
	if e.Type != "" || e.Field != "" {
		b.WriteString(e.Type)
		if e.Type != "" && e.Field != "" {
			b.WriteByte('.')
		}
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	if e.Tag != "" {
		b.WriteString("tag ")
		b.WriteString(e.Tag)
		b.WriteString(": ")
	}
	if e.Offset >= 0 {
		b.WriteString(strconv.Quote(e.Input))
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	if e.Offset >= 0 {
		b.WriteString(" at offset ")
		b.WriteString(strconv.Itoa(e.Offset))
	}
	return b.String()
}

func syntaxErr(input string, off int, format string, args ...any) *Error {
	return &Error{Input: input, Offset: off, Reason: fmt.Sprintf(format, args...), Syntax: true}
}

func invalidErr(input string, off int, format string, args ...any) *Error {
	return &Error{Input: input, Offset: off, Reason: fmt.Sprintf(format, args...)}
}
