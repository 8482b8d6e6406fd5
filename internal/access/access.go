// Package access lets the module's packages read what the engine keeps
// unexported: the engine sets these functions when it is initialized, so
// that users of package engine see no method that only the module needs.
package access

import (
	"context"
	"log/slog"
	"time"

	"github.com/slidelimit/slidelimit/rules"
)

var (
	// EnginePrefix returns the key prefix of an *engine.Engine
	// (engine.WithPrefix), under which the rule overrides live too.
	EnginePrefix func(engine any) string
	// EngineLogger returns the logger of an *engine.Engine
	// (engine.WithLogger), which the rule overrides log with.
	EngineLogger func(engine any) *slog.Logger
)

// MiddlewareParts returns what a []middleware.Option configures that a
// root package throttle uses: the hooks ([]func(middleware.Event)) and
// the limit functions (map[string]middleware.LimitFunc).
var MiddlewareParts func(opts any) (hooks, limits any)

// What the root package, the operator page, the replay and the
// benchmarks use of an *engine.Engine. Engine values are passed as any;
// EnginePeek takes an engine.Request and returns an engine.Decision, and
// EngineTallies returns an engine.Option.
var (
	EnginePeek                func(e any, ctx context.Context, req any) (any, error)
	EngineReset               func(e any, ctx context.Context, scope string, l rules.Limiter, subject string, hashed bool) error
	EngineTopDenied           func(e any, ctx context.Context, since time.Duration, n int) ([]Denials, error)
	EngineFailMode            func(e any) rules.FailMode
	EngineFinishAsyncFailures func(e any) uint64
	EngineTallies             func(on bool) any
)

// Denials is how many times a subject was denied by one limiter of one
// scope, fleet-wide, in the period asked of the engine's tallies
// (AdminHandler's top denied).
type Denials struct {
	// Scope is the request's scope (a route pattern or a scope: name).
	Scope string
	// Limiter is the limiter's ID (rules.Limiter.ID): "ip", "user",
	// "header(X-Api-Key)", "user[bytes]".
	Limiter string
	// Subject is the check's subject as the engine was given it
	// (engine.Check.Subject). For a subject stored hashed (engine.WithHashSubjects, or
	// longer than 128 bytes) it is, when this process denied it lately,
	// the subject, or only its first bytes for one longer than 128 bytes
	// (Truncated: the process never keeps a long subject whole); otherwise
	// it is the stored hash ("#" and base64url), with Hashed set.
	Subject string
	// Hashed reports that Subject is the stored hash, not the subject.
	Hashed bool
	// Truncated reports that Subject is the first bytes (at most 48, cut
	// at a UTF-8 character) of a subject longer than 128 bytes.
	Truncated bool
	// Hash is the stored hash of a subject stored hashed, "" for one
	// stored as is: what engine.Check.Hashed and a reset take to peek
	// at or reset the subject without its value.
	Hash string
	// Denied is the number of denials counted in the period.
	Denied int64
}

// IsStoredHash reports whether s has the form of a stored hash ("#" and
// 43 base64url characters), as Denials.Hash reports it and
// engine.Check.Hashed takes it.
func IsStoredHash(s string) bool {
	if len(s) != 1+43 || s[0] != '#' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
