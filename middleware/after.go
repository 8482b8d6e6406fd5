package middleware

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
)

// outcome is what the steps after the handler learn of its run.
type outcome struct {
	// status is the final status the handler answered with; 200 for a
	// handler that wrote nothing, as net/http sends.
	status int
	// hijacked reports that the handler took the connection: the status is
	// unknown.
	hijacked bool
	// panicked reports that the handler panicked; the panic goes on after
	// the steps.
	panicked bool
}

// serveAdmitted runs next for a request that went through respond, then
// the steps after the handler. They run however the handler ends —
// normally, by panic, by hijack or after the client hung up — so that
// nothing the request holds outlives it.
func (l *limiter) serveAdmitted(w http.ResponseWriter, next http.Handler, c *call) {
	if !l.hasAfter(c) {
		next.ServeHTTP(w, c.r)
		return
	}
	if l.settles(c) {
		l.prepareSettle(c)
	}
	sw := &statusWriter{ResponseWriter: w}
	panicked := true
	defer func() { l.afterHandler(c, sw.outcome(panicked), sw.written) }()
	next.ServeHTTP(sw, c.r)
	panicked = false
}

// hasAfter reports whether a step after the handler has work for c, so
// that a request without any runs next unwrapped.
func (l *limiter) hasAfter(c *call) bool {
	return c.dec.Allowed && (l.needsGiveBack() || l.needsRelease(c) || l.settles(c))
}

// afterHandler finishes the request once its handler has run: it gives
// it back (count:), settles its costs (WithSettle) and releases its slots,
// with one finish (lifecycle.Finish: the engine's FinishAsync, which the
// response does not wait for). The client may be gone; the work must be
// done all the same.
func (l *limiter) afterHandler(c *call, o outcome, written int64) {
	ctx := context.WithoutCancel(c.r.Context())
	out := engine.Outcome{GiveBack: l.givesBack(o), Actual: l.actualCosts(c, o, written)}
	if err := lifecycle.Finish(ctx, l.decider, &c.req, &c.dec, out); err != nil {
		// Backend trouble, as in logBackend: one line per backendLogEvery.
		if ok, held := l.backendLog.Allow(time.Now()); ok {
			l.logger.LogAttrs(ctx, slog.LevelWarn, "slidelimit: finishing the request failed (give-back, settlement or release of its slots); retried, and its slots free when their lease ends",
				slog.String("scope", c.req.Scope), slog.Int("status", o.status), slog.Any("error", err),
				slog.Int64("errors_not_logged", held))
		}
	}
}

// outcome returns what w saw of the handler's run.
func (w *statusWriter) outcome(panicked bool) outcome {
	o := outcome{status: w.status, hijacked: w.hijacked, panicked: panicked}
	if o.status == 0 && !o.hijacked && !panicked {
		o.status = http.StatusOK // what net/http sends for a handler that wrote nothing
	}
	return o
}
