package lifecycle

import (
	"errors"
	"strconv"
)

// The errors of the steps before the handler, for every transport; their
// text says "middleware:", the package users configure them through, and
// middleware.ErrBadRequest is ErrBadRequest. NewRules reports ErrNoFinish
// as Transport.NoFinish.
var (
	// ErrCost means a cost function failed or returned a cost below 1. The
	// request is not counted and is answered with 500, or with 400 when the
	// error wraps ErrBadRequest.
	ErrCost = errors.New("middleware: cost function failed")
	// ErrBadRequest is for cost and limit functions to wrap when the
	// request itself cannot be priced or has no limit; the request is then
	// answered with 400 instead of 500 (middleware.ErrBadRequest).
	ErrBadRequest = errors.New("middleware: bad request")
	// ErrLimit means a limit function failed or returned a limit outside
	// 1..the window's cap. The request is not counted and is answered with
	// 500, or with 400 when the error wraps ErrBadRequest.
	ErrLimit = errors.New("middleware: limit function failed")
	// ErrSubject means a value that a rule of its kind never counts,
	// such as an IP rule's value that is not an address (Peek, Reset).
	ErrSubject = errors.New("middleware: invalid subject")
	// ErrNoScope means no scope could be found for a request: the group has
	// no scope: statement, neither WithScope nor WithScopeFunc gave one, and
	// the router did not set http.Request.Pattern. The request is answered
	// with 500 because counting it under a guessed scope would either merge
	// unrelated routes or give every path its own windows.
	ErrNoScope = errors.New("middleware: no scope for request")
	// ErrNoFinish means a group has work after the handler — a count:
	// statement, an in-flight window (N concurrent) or a cost settled
	// with WithSettle — but its Decider has no FinishAsync, so requests
	// could never be given back, settled or have their slots freed.
	ErrNoFinish = errors.New("middleware: count:, in-flight windows and WithSettle need a decider that can finish requests (as *engine.Engine can)")
)

// CostError reports a cost function that failed, or returned a cost below
// 1, for one request. It unwraps to ErrCost and to the function's error.
type CostError struct {
	// Name is the cost function name.
	Name string
	// Rule is the ID of the first rule that names it.
	Rule string
	// Cost is what the function returned.
	Cost int64
	// Err is the function's error, or nil when the cost was below 1.
	Err error
}

// Error implements the error interface.
func (e *CostError) Error() string {
	s := "middleware: cost function " + strconv.Quote(e.Name) + " of rule " + e.Rule + ": "
	if e.Err != nil {
		return s + e.Err.Error()
	}
	return s + "returned cost " + strconv.FormatInt(e.Cost, 10) + ", want at least 1"
}

// Unwrap returns ErrCost and the function's error.
func (e *CostError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrCost}
	}
	return []error{ErrCost, e.Err}
}

// LimitError reports a limit function that failed, or returned a limit its
// window cannot have, for one request. It unwraps to ErrLimit and to the
// cause: the function's error, or the rules error for a value outside
// 1..cap.
type LimitError struct {
	// Name is the limit function name.
	Name string
	// Rule is the ID of the rule whose window names it, and Window
	// the window as rule text writes it.
	Rule, Window string
	// Limit is what the function returned.
	Limit int64
	// Err is the cause.
	Err error
}

// Error implements the error interface.
func (e *LimitError) Error() string {
	return "middleware: limit function " + strconv.Quote(e.Name) + " for window " + e.Window + " of rule " +
		e.Rule + ": " + e.Err.Error()
}

// Unwrap returns ErrLimit and the cause.
func (e *LimitError) Unwrap() []error { return []error{ErrLimit, e.Err} }
