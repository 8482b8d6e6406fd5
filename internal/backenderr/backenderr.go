// Package backenderr holds the errors of Redis trouble that package engine
// and the denial tallies (internal/tally) share: the sentinel that
// engine.ErrBackend is, the cause of a call not made to a server
// considered down, and the error of a failed operation.
package backenderr

import "errors"

var (
	// ErrBackend is engine.ErrBackend: every error of Redis trouble
	// matches it.
	ErrBackend = errors.New("engine: redis failed")
	// ErrNotAsked is the cause of a call not made because the server it
	// needs is considered down.
	ErrNotAsked = errors.New("engine: redis considered down, not asked")
)

// Error reports that Redis could not do what operation Op asked. It
// unwraps to Err and matches ErrBackend.
type Error struct {
	// Op is the operation, such as "allow", "reset" or "tally".
	Op string
	// Err is the cause.
	Err error
}

func (e *Error) Error() string {
	return "engine: redis " + e.Op + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is ErrBackend.
func (e *Error) Is(target error) bool { return target == ErrBackend }
