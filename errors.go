package slidelimit

import (
	"errors"
	"reflect"
	"strconv"
	"strings"

	"github.com/slidelimit/slidelimit/internal/registry"
	"github.com/slidelimit/slidelimit/internal/throttle"
	"github.com/slidelimit/slidelimit/rules"
)

// ConfigError reports a mistake in what the program configured or asked
// for: a rule text, a struct tag, an option, a route, a subject to peek at
// or a throttled call. Kind says which; Err is the specific cause, such as
// a *rules.Error or a *middleware.ConfigError. Failures of Redis are never a
// ConfigError, so one errors.As tells a bad rule from a store failure.
type ConfigError struct {
	// Kind is what is wrong: "rule" (a rule text or tag, or a function,
	// role or middleware option it names), "option" (an option of New),
	// "route" (a pattern, mux or handler given to Register or Handle),
	// "scope" or "limiter" (Peek or Reset named none registered), "call" (a
	// throttled Call lacks a key or a cost) or "never-fits" (a call's cost
	// is above a window's whole limit).
	Kind string
	// Route is the route pattern, scope or throttle name, or empty.
	Route string
	// Field is the struct field that declared the route, or empty.
	Field string
	// Tag is the struct tag key ("limit" or "route") that holds Text, or
	// empty.
	Tag string
	// Text is the rule text as the user wrote it, or empty.
	Text string
	// Offset is the byte offset of the problem in Text, or -1.
	Offset int
	// Err is the cause.
	Err error
}

// Error implements the error interface.
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(prefix)
	var re *rules.Error
	located := errors.As(e.Err, &re) && (re.Field != "" || re.Type != "")
	if e.Field != "" && !located {
		b.WriteString("field " + e.Field + " ")
	}
	if e.Route != "" {
		b.WriteString("route " + strconv.Quote(e.Route) + ": ")
	}
	if e.Err != nil {
		b.WriteString(strings.TrimPrefix(e.Err.Error(), prefix))
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *ConfigError) Unwrap() error { return e.Err }

const prefix = "slidelimit: "

// kindError is a cause that decides the Kind of its ConfigError.
type kindError struct{ kind, msg string }

func (e *kindError) Error() string { return e.msg }

// Causes of ConfigErrors that are not the rule language's.
var (
	errNilMux       = &kindError{"route", prefix + "nil mux"}
	errNilHandler   = &kindError{"route", prefix + "nil handler"}
	errPattern      = &kindError{"route", prefix + "pattern rejected by http.ServeMux"}
	errOverridesOff = &kindError{"option", prefix + "rule overrides are off"}
)

// kindOf returns the Kind of a ConfigError caused by err.
func kindOf(err error) string {
	switch k := (*kindError)(nil); {
	case errors.As(err, &k):
		return k.kind
	case errors.Is(err, throttle.ErrCall):
		return "call"
	case errors.Is(err, throttle.ErrNeverFits):
		return "never-fits"
	case errors.Is(err, registry.ErrUnknownScope):
		return "scope"
	case errors.Is(err, registry.ErrUnknownRule):
		return "limiter"
	}
	return "rule"
}

// optionError returns err, an invalid option of New, as a *ConfigError.
func optionError(err error) *ConfigError {
	ce := configError("", "", "", err)
	ce.Kind = "option"
	return ce
}

// configError returns err as a *ConfigError for route, field and text,
// the rule text as the user wrote it, located by the *rules.Error it
// holds, if any; an error that already is one is returned with the
// missing parts filled in.
func configError(route, field, text string, err error) *ConfigError {
	var ce *ConfigError
	if errors.As(err, &ce) {
		c := *ce
		if c.Route == "" {
			c.Route = route
		}
		if c.Field == "" {
			c.Field = field
		}
		return &c
	}
	ce = &ConfigError{Kind: kindOf(err), Route: route, Field: field, Text: text, Offset: -1, Err: err}
	var re *rules.Error
	if errors.As(err, &re) {
		ce.Tag = re.Tag
		if re.Field != "" && ce.Field == "" {
			ce.Field = re.Field
		}
		if re.Offset >= 0 {
			ce.Text, ce.Offset = re.Input, re.Offset
		}
	}
	return ce
}

// configErrors returns err, alone or joined, as ConfigErrors: each error
// of an errors.Join becomes one, so that Register reports every problem.
// Other errors wrapping several, such as fmt.Errorf("%w: %w"), are one
// problem and stay whole.
func configErrors(route, field, text string, err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok && reflect.TypeOf(err).String() == "*errors.joinError" {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, configError(route, field, text, e))
		}
		return errors.Join(out...)
	}
	return configError(route, field, text, err)
}
