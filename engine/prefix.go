package engine

import (
	"context"
	"log/slog"

	"github.com/slidelimit/slidelimit/rules"
)

// KeyPrefix returns the key prefix of e's keys (WithKeyPrefix).
func (e *Engine) KeyPrefix() string { return e.keyer.Prefix() }

// Logger returns the logger e logs with (WithLogger).
func (e *Engine) Logger() *slog.Logger { return e.log }

// Down reports whether e considers its one Redis server down: decisions
// then follow their fail mode without asking it. With a Cluster or a Ring
// it reports false.
func (e *Engine) Down() bool { return e.group == groupAll && e.doms.One.Down.Load() }

// Peek reports what Allow would decide for req now, counting and writing
// nothing. Used excludes req; Allowed says whether req would be admitted.
// It always asks Redis. Errors are as for Allow.
func (e *Engine) Peek(ctx context.Context, req Request) (Decision, error) {
	return e.peek(ctx, req)
}

// Reset clears the windows of rule l for subject in scope, and its
// block, everywhere the engine keeps them; an in-flight window frees its
// slots. With hashed, subject is a stored hash, else an ErrInvalid error.
// With WithRegions it resets this region only: ResetRequest resets a
// shared request in every region.
func (e *Engine) Reset(ctx context.Context, scope string, l rules.Rule, subject string, hashed bool) error {
	return e.reset(ctx, scope, l, subject, hashed)
}
