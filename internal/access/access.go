// Package access lets the module's packages read what the engine keeps
// unexported: the engine sets these functions when it is initialized, so
// that users of package engine see no method that only the module needs.
package access

import "log/slog"

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
