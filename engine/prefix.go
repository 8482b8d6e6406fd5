package engine

import "log/slog"

// Prefix returns the string every Redis key and channel of the engine
// starts with (WithPrefix). Processes that share a Redis and a prefix share
// their windows; slidelimit keeps its rule overrides under it too.
func (e *Engine) Prefix() string { return e.keyer.prefix }

// Logger returns the logger of the engine (WithLogger); slidelimit logs
// the rule overrides it applies with it.
func (e *Engine) Logger() *slog.Logger { return e.log }
