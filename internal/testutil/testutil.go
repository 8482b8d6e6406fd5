// Package testutil holds helpers shared by the module's tests: an engine
// closed when the test ends, and a log sink and a hook recorder that tests
// read while the code under test may still be writing to them. The
// engine's own tests cannot import it; helpers that need no engine live
// in redistest.
package testutil

import (
	"bytes"
	"log/slog"
	"slices"
	"sync"

	"github.com/slidelimit/slidelimit/middleware"
)

// LogBuffer is an io.Writer for a log handler, safe for concurrent use.
// The zero value is empty and ready to use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// NewLogger returns a text logger writing records of level and above to a
// new LogBuffer, and the buffer.
func NewLogger(level slog.Level) (*slog.Logger, *LogBuffer) {
	buf := &LogBuffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level})), buf
}

// Events records the events of a middleware hook, safe for concurrent use.
// The zero value is empty and ready to use.
type Events struct {
	mu sync.Mutex
	ev []middleware.Event
}

// Hook records ev; pass it to WithHook. The decision's windows are copied,
// so what was recorded cannot change afterwards.
func (e *Events) Hook(ev middleware.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev.Decision.Windows = slices.Clone(ev.Decision.Windows)
	e.ev = append(e.ev, ev)
}

// All returns the events recorded so far, in order.
func (e *Events) All() []middleware.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.ev)
}

// Last returns the last event recorded, or the zero Event when there is
// none.
func (e *Events) Last() middleware.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ev) == 0 {
		return middleware.Event{}
	}
	return e.ev[len(e.ev)-1]
}
