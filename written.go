package slidelimit

import (
	"errors"
	"reflect"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// written points the *rules.Error in err, alone or joined, into text, the
// rule group as the user wrote it: the middleware checks roles on the
// parsed group, whose errors point into its canonical form.
func written(err error, text string) error {
	out, _ := relocate(err, text)
	return out
}

func relocate(err error, text string) (error, bool) {
	switch e := err.(type) {
	case *rules.Error:
		r := lifecycle.Relocate(e, text)
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

// limitTag returns the limit tag of the field of handlers (a struct or a
// pointer to one, as Register takes) whose route tag is pattern; rules.Routes
// accepts no two fields with one pattern.
func limitTag(handlers any, pattern string) string {
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
