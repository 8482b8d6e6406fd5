package middleware

import (
	"context"
	"log/slog"
	"time"
)

// needsRelease reports whether c holds slots of in-flight windows, which
// the step after the handler frees.
func (l *limiter) needsRelease(c *call) bool { return l.releaser != nil && c.p.slots }

// releaseSlots is the step after the handler of a request whose limiters
// have in-flight windows: it frees the request's slots, however the
// handler ended (normally, by panic, by hijack, after the client hung
// up). A release that fails is logged; the engine retries it, and the
// slot frees at the latest one lease later, as it is no longer renewed.
func (l *limiter) releaseSlots(ctx context.Context, c *call) {
	if !l.needsRelease(c) {
		return
	}
	if err := l.releaser.Release(ctx, c.req, c.dec); err != nil {
		if ok, _ := l.releaseLog.Allow(time.Now()); !ok {
			return
		}
		l.logger.LogAttrs(ctx, slog.LevelWarn, "slidelimit: release of in-flight slots failed; retried, or freed when their lease ends",
			slog.String("scope", c.req.Scope), slog.Any("error", err))
	}
}
