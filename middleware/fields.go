package middleware

import (
	"net/http"
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
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

// PolicyName returns the name under which window w of limiter l is
// advertised in the RateLimit-Policy and RateLimit fields: the limiter's ID,
// a hyphen and the period with its count, as in "ip-1s", "user-1min",
// "header(X-Api-Key)-30s" or "global-500ms"; an in-flight window (N
// concurrent) is named by the limiter's ID and "-concurrent", as in
// "user-concurrent".
func PolicyName(l rules.Limiter, w rules.Window) string { return lifecycle.PolicyName(l, w) }

// secondsDuration converts whole seconds back to a Duration.
func secondsDuration(s int64) time.Duration { return time.Duration(s) * time.Second }

// setLegacy sets the X-RateLimit-* fields for one window state, in the unit
// of its RateLimit item (per divides the quota of a constant cost).
func setLegacy(h http.Header, ws engine.WindowState, per int64) {
	h.Set(headerLegacyLim, strconv.FormatInt(ws.Window.Limit/per, 10))
	h.Set(headerLegacyRem, strconv.FormatInt(max(0, ws.Remaining)/per, 10))
	h.Set(headerLegacyRst, strconv.FormatInt(lifecycle.CeilSeconds(ws.Reset), 10))
}
