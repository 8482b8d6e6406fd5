package middleware

import (
	"strconv"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
)

// ErrBadRequest is for cost and limit functions to wrap when the request
// itself cannot be priced or has no limit, such as a malformed Range
// header or a token naming no tenant: the request is answered with 400
// instead of 500. The error's text is never written to the client.
var ErrBadRequest = lifecycle.ErrBadRequest

// ConfigError reports a mistake found before any request is served: an
// option given a value it refuses, a function the rules name that no
// option registered, or a Decider that is missing or cannot finish
// requests. contrib/grpclimit reports its mistakes with it too. A failure
// while serving (a cost function's error, Redis) is never a ConfigError.
type ConfigError struct {
	// Kind is what is wrong: "option" for an option's value,
	// "unregistered" for a key, cost or limit function the rules name,
	// "decider" for the Decider, "transport" for a net/http option given
	// to another transport, "rules" for a gRPC method's rules
	// (contrib/grpclimit).
	Kind string
	// Option is the option concerned, such as "WithKeyFunc", or "".
	Option string
	// Name is the offending value or name as text, such as the option's
	// value, the function's name or a gRPC method.
	Name string
	// Reason says what is wrong, in lower case.
	Reason string
	// Err is the cause, or nil.
	Err error
}

// Error implements the error interface.
func (e *ConfigError) Error() string {
	s := "middleware: "
	if e.Kind == kindOption {
		s += e.Option + "(" + strconv.Quote(e.Name) + "): "
	}
	s += e.Reason
	if e.Err != nil {
		if e.Reason != "" {
			s += ": "
		}
		s += e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *ConfigError) Unwrap() error { return e.Err }

// The kinds of a ConfigError.
const (
	kindOption       = "option"
	kindUnregistered = "unregistered"
	kindDecider      = "decider"
	kindTransport    = "transport"
)

// noFinish is the error of a group with work after the handler whose
// Decider cannot finish requests.
func noFinish() error {
	return &ConfigError{Kind: kindDecider, Reason: "count:, in-flight windows and WithSettle need a decider that can finish requests (as *engine.Engine can)", Err: lifecycle.ErrNoFinish}
}

// unregistered is the error of a function the rules name, as in what,
// that option did not register; role is the role whose rules name it, or "".
func unregistered(option, name, what, role string) error {
	if role != "" {
		what += " of role(" + role + ")="
	}
	return &ConfigError{Kind: kindUnregistered, Option: option, Name: name, Reason: what + " (use " + option + ")"}
}
