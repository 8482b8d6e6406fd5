package lifecycle

import (
	"errors"
	"reflect"

	"github.com/slidelimit/slidelimit/rules"
)

// Relocate returns err, a *rules.Error pointing into the canonical form of
// a group (as role.Policy.Check's do), pointing into text, the group as
// the user wrote it: statements may be written in any order. The errors
// of an errors.Join are relocated each. Any other error, or one that text
// does not spell, is returned as is.
func Relocate(err error, text string) error {
	out, _ := relocate(err, text)
	return out
}

// relocate is Relocate; it reports whether it changed err.
func relocate(err error, text string) (error, bool) {
	switch e := err.(type) {
	case *rules.Error:
		if e == nil {
			return err, false
		}
		r := e.Relocate(text)
		return r, r != error(e)
	case interface{ Unwrap() []error }:
		errs := e.Unwrap()
		out := make([]error, len(errs))
		changed := false
		for i, x := range errs {
			var c bool
			out[i], c = relocate(x, text)
			changed = changed || c
		}
		if changed {
			return errors.Join(out...), true
		}
	}
	return err, false
}

// LimitTag returns the limit tag of the field of handlers (a struct or a
// pointer to one, as Register takes) whose route tag is pattern;
// rules.Routes accepts no two fields with one pattern.
func LimitTag(handlers any, pattern string) string {
	t := reflect.TypeOf(handlers)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return ""
	}
	for _, f := range reflect.VisibleFields(t) {
		if f.Tag.Get("route") == pattern {
			return f.Tag.Get("limit")
		}
	}
	return ""
}
