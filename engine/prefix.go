package engine

import (
	"context"
	"log/slog"

	"github.com/slidelimit/slidelimit/internal/access"
	"github.com/slidelimit/slidelimit/rules"
)

// The root package keeps its rule overrides under the engine's prefix and
// logs them with the engine's logger, and peeks and resets for its
// operator page; it reaches them through package
// access, so that they are no part of the engine's API.
func init() {
	access.EnginePrefix = func(e any) string { return e.(*Engine).keyer.prefix }
	access.EngineLogger = func(e any) *slog.Logger { return e.(*Engine).log }
	access.EnginePeek = func(e any, ctx context.Context, req any) (any, error) {
		return e.(*Engine).peek(ctx, req.(Request))
	}
	access.EngineReset = func(e any, ctx context.Context, scope string, l rules.Limiter, subject string, hashed bool) error {
		return e.(*Engine).reset(ctx, scope, l, subject, hashed)
	}
	access.EngineFailMode = func(e any) rules.FailMode { return e.(*Engine).fail }
	access.EngineFinishAsyncFailures = func(e any) uint64 { return e.(*Engine).finishAsyncFailures() }
	access.ErrNotAsked = errNotAsked
	access.BackendError = func(op string, err error) error { return &backendError{Op: op, Err: err} }
}
