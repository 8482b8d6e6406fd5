package admin

import (
	"net/http"
	"time"
)

// Throttle is one throttle of GET /api/throttles and of the page: the calls
// out that the Limiter holds under another service's limits, as seen in
// this process.
type Throttle struct {
	Name  string `json:"name"`
	Rules string `json:"rules"`
	// Waiting is the number of callers waiting now.
	Waiting int64 `json:"waiting"`
	// WaitP50 and WaitP99 are the wait percentiles, in seconds, over the
	// last admissions.
	WaitP50 float64 `json:"wait_p50"`
	WaitP99 float64 `json:"wait_p99"`
	// Admitted counts the calls admitted.
	Admitted int64 `json:"admitted"`
	// Upstream429s counts the 429 and 503 answers of the upstream.
	Upstream429s int64 `json:"upstream_429s"`
}

// ThrottleSource is what a Source that has throttles offers too; the page
// shows them beside the routes.
type ThrottleSource interface {
	Throttles() []Throttle
}

// throttles returns the throttles of the source, none when it has none.
func (h *handler) throttles() []Throttle {
	if ts, ok := h.src.(ThrottleSource); ok {
		return ts.Throttles()
	}
	return nil
}

func (h *handler) throttlesAPI(w http.ResponseWriter, _ *http.Request) {
	out := h.throttles()
	if out == nil {
		out = []Throttle{}
	}
	writeJSON(w, map[string][]Throttle{"throttles": out})
}

// ms writes a wait in seconds as milliseconds for a person.
func ms(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}
