// Package access lets the module's packages read what the engine and the
// root package keep unexported: they set these functions when they are
// initialized, so that their users see no name that only the module needs.
package access

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

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
// the limit functions (map[string]func(*http.Request) (int64, error)).
var MiddlewareParts func(opts any) (hooks, limits any)

// MiddlewareSubject returns the subject under which a middleware built
// with opts (a []middleware.Option) counts value in the windows of a
// limiter of kind; it fails with an error matching lifecycle.ErrSubject
// for a value the middleware never counts under kind.
var MiddlewareSubject func(kind rules.Kind, value string, opts any) (string, error)

// Denial is a denial of engine.Engine.Allow as the engine reports it to
// its denial hook: what the denial tallies (internal/tally) count. Its
// strings may be views of the request's: a hook that keeps one past the
// call copies it.
type Denial struct {
	// Scope is the request's scope.
	Scope string
	// Kind, Name and Cost are those of the denying check's limiter
	// (rules.Limiter).
	Kind rules.Kind
	Name string
	Cost string
	// Subject is the denying check's subject when stored as is, or its
	// stored hash ("#" and base64url) when Hashed.
	Subject string
	// Shown is what may be shown of a hashed subject: the subject when it
	// is at most 128 bytes, its first 48 bytes (cut at a UTF-8 character;
	// Cut) when longer, "" when unknown (a check given by its hash).
	Shown string
	// Hashed reports that Subject is the stored hash.
	Hashed bool
	// Cut reports that Shown is the start of a longer subject.
	Cut bool
}

// Store is what the denial tallies of an engine write and read Redis
// with: the engine's client, key prefix, timeout, logger and clock, and
// whether it considers its single server down (then the tallies neither
// write nor read, as decisions do not ask it).
type Store struct {
	Client  interface{ Pipeline() redis.Pipeliner }
	Prefix  string
	Timeout time.Duration
	Log     *slog.Logger
	Now     func() time.Time
	Down    func() bool
	// AppendEscaped appends s escaped as in the engine's keys: '%', '{',
	// '}', '|', ':', '#', space and control bytes percent-encoded.
	AppendEscaped func(b []byte, s string) []byte
}

var (
	// SetDenialHook sets the function an *engine.Engine calls with each
	// denial of Allow by a window (by Redis, the cache of denials or the
	// fallback limiter), on the request's goroutine; nil removes it. It
	// is set before the engine decides, not while it does.
	SetDenialHook func(engine any, hook func(Denial))
	// EngineStore returns the Store of an *engine.Engine.
	EngineStore func(engine any) Store
)

// What the root package, the operator page, the replay and the
// benchmarks use of an *engine.Engine. Engine values are passed as any;
// EnginePeek takes an engine.Request and returns an engine.Decision.
var (
	EnginePeek                func(e any, ctx context.Context, req any) (any, error)
	EngineReset               func(e any, ctx context.Context, scope string, l rules.Limiter, subject string, hashed bool) error
	EngineFailMode            func(e any) rules.FailMode
	EngineFinishAsyncFailures func(e any) uint64
)

// ErrNotAsked is what the engine's errors wrap, beside engine.ErrBackend,
// when it did not ask a Redis server it considers down; BackendError
// returns the engine's error of operation op failing with err, which
// matches engine.ErrBackend and unwraps to err. The internal/tally
// package reports its own Redis failures with them.
var (
	ErrNotAsked  error
	BackendError func(op string, err error) error
)

// What the demo, the benchmarks and the root package's tests use of a
// *slidelimit.Limiter and its options, set by package slidelimit: the
// Limiter's engine (an *engine.Engine); the rule overrides in force, as
// Override values with the overrides' version; and options of New (each a
// slidelimit.Option) that set how often the Limiter checks the overrides'
// version (<= 0: overrides off), how often it writes its denial tallies
// (<= 0: off).
var (
	LimiterEngine func(lim any) any
	LimiterRules  func(lim any, ctx context.Context) (version int64, in []Override, err error)
	RulesCheck    func(d time.Duration) any
	TallyFlush    func(d time.Duration) any
)

// Override is a rule override in force: the canonical rule text that
// replaces the group of Scope.
type Override struct {
	Scope string `json:"scope"`
	Rules string `json:"rules"`
}

// IsStoredHash reports whether s has the form of a stored hash ("#" and
// 43 base64url characters), as the denial tallies report it and
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
