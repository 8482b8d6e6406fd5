package middleware

import (
	"errors"
	"strconv"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
)

// Errors returned by New and Subject, or reported to the logger and hooks
// while serving.
var (
	// ErrConfig means an option was given an invalid value.
	ErrConfig = errors.New("middleware: invalid configuration")
	// ErrUnknownKey means a group uses key(name) but no KeyFunc is
	// registered under name.
	ErrUnknownKey = errors.New("middleware: no key function registered")
	// ErrUnknownCost means a group uses a cost function name, as in
	// user[bytes], but no CostFunc is registered under it.
	ErrUnknownCost = errors.New("middleware: no cost function registered")
	// ErrCost means a cost function failed or returned a cost below 1. The
	// request is not counted and is answered with 500, or with 400 when the
	// error wraps ErrCostBadRequest.
	ErrCost = lifecycle.ErrCost
	// ErrCostBadRequest is for cost functions to wrap when the request
	// itself cannot be costed, such as a malformed Range header; the
	// middleware then answers 400 instead of 500. The error's text is never
	// written to the client.
	ErrCostBadRequest = lifecycle.ErrCostBadRequest
	// ErrNoScope means no scope could be found for a request: the group has
	// no scope: statement, neither WithScope nor WithScopeFunc gave one, and
	// the router did not set http.Request.Pattern. The request is answered
	// with 500 because counting it under a guessed scope would either merge
	// unrelated routes or give every path its own windows.
	ErrNoScope = lifecycle.ErrNoScope
	// ErrNilDecider means New was called without a Decider.
	ErrNilDecider = errors.New("middleware: nil decider")
	// ErrNoFinish means a group has work after the handler — a count:
	// statement, an in-flight window (N concurrent) or a cost settled with
	// WithSettle — but its Decider is not a Finisher, so requests could
	// never be given back, settled or have their slots freed.
	ErrNoFinish = lifecycle.ErrNoFinish
	// ErrSubject means Subject was given a value that a limiter of its kind
	// never counts, such as an IP limiter's value that is not an address.
	ErrSubject = errors.New("middleware: invalid subject")
)

// ConfigError describes an invalid option value. It unwraps to ErrConfig.
type ConfigError struct {
	// Option is the name of the option, such as "WithTrustedProxies".
	Option string
	// Value is the offending value as text.
	Value string
	// Reason says what is wrong, in lower case.
	Reason string
}

// Error implements the error interface.
func (e *ConfigError) Error() string {
	return "middleware: " + e.Option + "(" + strconv.Quote(e.Value) + "): " + e.Reason
}

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }

// UnknownKeyError reports a key(name) limiter without a KeyFunc. It unwraps
// to ErrUnknownKey.
type UnknownKeyError struct {
	// Name is the key name used by the group.
	Name string
	// Role is the role whose override uses the key, or empty for the
	// group's default limiters.
	Role string
}

// Error implements the error interface.
func (e *UnknownKeyError) Error() string {
	s := "middleware: key(" + e.Name + "): no key function registered (use WithKeyFunc)"
	if e.Role != "" {
		s += " in role(" + e.Role + ") override"
	}
	return s
}

// Unwrap returns ErrUnknownKey.
func (e *UnknownKeyError) Unwrap() error { return ErrUnknownKey }

// UnknownCostError reports a limiter whose cost names no registered
// CostFunc. It unwraps to ErrUnknownCost.
type UnknownCostError struct {
	// Name is the cost function name used by the group.
	Name string
	// Limiter is the ID of the limiter that names it, as in "user[bytes]".
	Limiter string
	// Role is the role whose override uses the limiter, or empty for the
	// group's default limiters.
	Role string
}

// Error implements the error interface.
func (e *UnknownCostError) Error() string {
	s := "middleware: unknown cost function " + strconv.Quote(e.Name) + " in limiter " + e.Limiter
	if e.Role != "" {
		s += " of role(" + e.Role + ") override"
	}
	return s + " (use WithCostFunc)"
}

// Unwrap returns ErrUnknownCost.
func (e *UnknownCostError) Unwrap() error { return ErrUnknownCost }

// CostError reports a cost function that failed, or returned a cost below
// 1, for one request. It unwraps to ErrCost and to the function's error.
type CostError = lifecycle.CostError
