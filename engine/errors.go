package engine

import (
	"errors"
	"strconv"

	"github.com/slidelimit/slidelimit/internal/backenderr"
)

// Sentinel errors. Match them with errors.Is; the unexported typed errors
// below carry the details in their text and match the sentinel of their
// kind.
var (
	// ErrBackend is matched by every error that reports Redis trouble: a
	// failed or timed-out call, an unexpected reply, a call skipped while
	// Redis is considered down. The Decision returned with it follows the
	// request's fail mode.
	ErrBackend = backenderr.ErrBackend
	// errNotAsked is wrapped by the backendError of a call that did not
	// ask Redis because a server it needs did not answer an earlier call
	// and has not answered the engine's background probe since.
	errNotAsked = backenderr.ErrNotAsked
	// ErrInvalid is matched by the error of a Request the engine cannot
	// evaluate and of an invalid option given to New.
	ErrInvalid = errors.New("engine: invalid argument")
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("engine: closed")
)

// backendError reports that Redis could not do what an operation asked,
// such as "allow", "peek", "reset", "rollback" or "giveback". It unwraps
// to the cause (a go-redis, network or context error, a reply the engine
// does not understand, or errNotAsked) and matches ErrBackend. The denial
// tallies report their failures with the same type.
type backendError = backenderr.Error

// requestError reports a Request the engine cannot evaluate. It matches
// ErrInvalid. A *plan.Error converts to it: their fields stay identical.
type requestError struct {
	// Check is the index of the offending check in Request.Checks, or -1
	// when the request as a whole is at fault.
	Check int
	// Window is the index of the offending window in the check's Windows,
	// or -1.
	Window int
	// Reason says what is wrong.
	Reason string
}

func (e *requestError) Error() string {
	s := "engine: invalid request"
	if e.Check >= 0 {
		s += ": check " + strconv.Itoa(e.Check)
		if e.Window >= 0 {
			s += " window " + strconv.Itoa(e.Window)
		}
	}
	return s + ": " + e.Reason
}

// Is reports whether target is ErrInvalid.
func (e *requestError) Is(target error) bool { return target == ErrInvalid }

// optionError reports an invalid Option given to New. It matches
// ErrInvalid.
type optionError struct {
	// Option is the option's name, such as "WithKeyPrefix".
	Option string
	// Reason says what is wrong.
	Reason string
}

func (e *optionError) Error() string {
	return "engine: invalid option " + e.Option + ": " + e.Reason
}

// Is reports whether target is ErrInvalid.
func (e *optionError) Is(target error) bool { return target == ErrInvalid }
