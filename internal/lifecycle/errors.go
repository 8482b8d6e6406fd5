package lifecycle

import (
	"errors"
	"strconv"
)

// The errors of the steps before the handler. They are the middleware's
// (middleware.ErrCost is ErrCost, and so on), which is why their text
// says "middleware:"; grpclimit reports the same values, so that a hook
// shared by both transports matches them once.
var (
	// ErrCost means a cost function failed or returned a cost below 1. The
	// request is not counted and is answered with 500, or with 400 when the
	// error wraps ErrCostBadRequest.
	ErrCost = errors.New("middleware: cost function failed")
	// ErrCostBadRequest is for cost functions to wrap when the request
	// itself cannot be costed, such as a malformed Range header; the
	// middleware then answers 400 instead of 500. The error's text is never
	// written to the client.
	ErrCostBadRequest = errors.New("middleware: request cannot be costed")
	// ErrLimit means a limit function failed or returned a limit outside
	// 1..the window's cap. The request is not counted and is answered with
	// 500, or with 400 when the error wraps ErrLimitBadRequest.
	ErrLimit = errors.New("middleware: limit function failed")
	// ErrLimitBadRequest is for limit functions to wrap when the request
	// itself has no limit, such as a token naming no tenant; the
	// middleware then answers 400 instead of 500. The error's text is never
	// written to the client.
	ErrLimitBadRequest = errors.New("middleware: request has no limit")
	// ErrNoScope means no scope could be found for a request: the group has
	// no scope: statement, neither WithScope nor WithScopeFunc gave one, and
	// the router did not set http.Request.Pattern. The request is answered
	// with 500 because counting it under a guessed scope would either merge
	// unrelated routes or give every path its own windows.
	ErrNoScope = errors.New("middleware: no scope for request")
	// ErrNoFinish means a group has work after the handler — a count:
	// statement, an in-flight window (N concurrent) or a cost settled
	// with WithSettle — but its Decider is not a Finisher, so requests
	// could never be given back, settled or have their slots freed.
	ErrNoFinish = errors.New("middleware: count:, in-flight windows and WithSettle need a decider that can finish requests (a Finisher, as *engine.Engine is)")
)

// CostError reports a cost function that failed, or returned a cost below
// 1, for one request. It unwraps to ErrCost and to the function's error.
type CostError struct {
	// Name is the cost function name.
	Name string
	// Limiter is the ID of the first limiter that names it.
	Limiter string
	// Cost is what the function returned.
	Cost int64
	// Err is the function's error, or nil when the cost was below 1.
	Err error
}

// Error implements the error interface.
func (e *CostError) Error() string {
	s := "middleware: cost function " + strconv.Quote(e.Name) + " of limiter " + e.Limiter + ": "
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
