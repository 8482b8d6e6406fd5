package engine

import (
	"log/slog"

	"github.com/slidelimit/slidelimit/internal/access"
)

// The root package keeps its rule overrides under the engine's prefix and
// logs them with the engine's logger; it reads both through package
// access, so that they are no part of the engine's API.
func init() {
	access.EnginePrefix = func(e any) string { return e.(*Engine).keyer.prefix }
	access.EngineLogger = func(e any) *slog.Logger { return e.(*Engine).log }
}
