// Package plan resolves an engine request to Redis keys and merged windows:
// the keys' names, what each counts, their blocks, calendars and distinct
// values. It does no Redis work and keeps no state between requests.
package plan

import (
	"strconv"
	"time"
	"unsafe"

	"github.com/slidelimit/slidelimit/rules"
)

// Check is the engine's Check: the engine converts one to the other, so
// their fields must stay identical (the compiler checks it).
type Check struct {
	rules.Rule
	Subject  string
	Hashed   bool
	Cost     int64
	Block    time.Duration
	Distinct string
}

// Request is what a plan is built from: the engine's Request, with its
// checks as [Check].
type Request struct {
	Scope  string
	Checks []Check
	Fail   rules.FailMode
	Zone   *time.Location
}

// Error reports a request the engine cannot evaluate. The engine converts
// it to its own error type, whose fields it shares.
type Error struct {
	// Check is the index of the offending check, or -1 for the request.
	Check int
	// Window is the index of the offending window in the check, or -1.
	Window int
	// Reason says what is wrong.
	Reason string
}

func (e *Error) Error() string {
	s := "engine: invalid request"
	if e.Check >= 0 {
		s += ": check " + strconv.Itoa(e.Check)
		if e.Window >= 0 {
			s += " window " + strconv.Itoa(e.Window)
		}
	}
	return s + ": " + e.Reason
}

// KeysOnly empties p's keys and their arguments, for a caller that appends
// its own keys to Keys: a finish names keys and nothing else.
func (p *Plan) KeysOnly() {
	clear(p.args)
	p.Keys, p.args, p.Blocked = p.Keys[:0], p.args[:0], 0
	p.resetRegions()
}

// stringBytes returns the bytes of s without copying; they must not be
// changed.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
