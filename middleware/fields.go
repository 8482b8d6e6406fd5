package middleware

import (
	"net/http"
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
)

// Response header field names.
const (
	headerPolicy     = "RateLimit-Policy"
	headerRateLimit  = "RateLimit"
	headerRetryAfter = "Retry-After"
	headerLegacyLim  = "X-RateLimit-Limit"
	headerLegacyRem  = "X-RateLimit-Remaining"
	headerLegacyRst  = "X-RateLimit-Reset"
)

// secondsDuration converts whole seconds back to a Duration.
func secondsDuration(s int64) time.Duration { return time.Duration(s) * time.Second }

// setLegacy sets the X-RateLimit-* fields for one window state, in the unit
// of its RateLimit item (per divides the quota of a constant cost).
func setLegacy(h http.Header, ws engine.WindowState, per int64) {
	h.Set(headerLegacyLim, strconv.FormatInt(ws.Window.Limit/per, 10))
	h.Set(headerLegacyRem, strconv.FormatInt(max(0, ws.Remaining)/per, 10))
	h.Set(headerLegacyRst, strconv.FormatInt(lifecycle.CeilSeconds(ws.Reset), 10))
}
