package middleware

import (
	"net/http"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
)

// run runs next for a request the Admission let through. When its
// Verdict asks for a finish (count:, in-flight windows, WithSettle), the
// handler runs with the context its costs are reported to and a writer
// that sees its status and the bytes it writes, and the Admission's Finish
// runs however the handler ends — normally, by panic, by hijack or after
// the client hung up — so that nothing the request holds outlives it.
// Finish queues the finish (engine.Engine.FinishAsync): the response does
// not wait for Redis.
func (l *limiter) run(w http.ResponseWriter, next http.Handler, c *call) {
	v := &c.Verdict
	if !v.Finish {
		next.ServeHTTP(w, c.r)
		return
	}
	r := c.r
	if v.Context != nil {
		r = r.WithContext(v.Context)
	}
	sw := &statusWriter{ResponseWriter: w}
	panicked := true
	defer func() { c.Finish(sw.outcome(panicked)) }()
	next.ServeHTTP(sw, r)
	panicked = false
}

// outcome returns what w saw of the handler's run: its status (200 for a
// handler that wrote nothing, as net/http sends), whether it is unknown
// (a panic, a hijack) and the bytes written.
func (w *statusWriter) outcome(panicked bool) lifecycle.Outcome {
	o := lifecycle.Outcome{Status: w.status, Unknown: panicked || w.hijacked, Written: w.written}
	if o.Status == 0 && !o.Unknown {
		o.Status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	return o
}
