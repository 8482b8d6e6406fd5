package admin

import (
	"context"
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
	// Active is the number of permits admitted and not yet finished.
	Active int64 `json:"active"`
	// Upstream429s counts the 429 and 503 answers of the upstream.
	Upstream429s int64 `json:"upstream_429s"`
	// Classes holds the same per class, when the rules have share
	// statements: each class they name, and "other".
	Classes []ThrottleClass `json:"classes,omitempty"`
}

// ThrottleClass is what a throttle did for the calls of one class: a row
// under its throttle on the page.
type ThrottleClass struct {
	Class        string  `json:"class"`
	Waiting      int64   `json:"waiting"`
	WaitP50      float64 `json:"wait_p50"`
	WaitP99      float64 `json:"wait_p99"`
	Admitted     int64   `json:"admitted"`
	Upstream429s int64   `json:"upstream_429s"`
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

// LearnedBlock is a block a throttle learned from its upstream's answer (a
// 429 or 503 with Retry-After), held in every process: GET /api/blocks and
// the page list one entry per rule and subject, with "learned":true.
type LearnedBlock struct {
	// Throttle is the throttle's name, the scope of its windows.
	Throttle string
	// Subjects are the subjects of the calls it holds (all of them: a
	// call of other subjects is not held).
	Subjects []LearnedSubject
	// Left is the block's time left, in seconds.
	Left float64
}

// LearnedSubject is a subject of a learned block: the ID of the rule
// that counts it, without its cost, and its fingerprint (Fingerprint of
// the stored subject), never its value, which may be the API key the
// calls are made with.
type LearnedSubject struct {
	Rule        string
	Fingerprint string
}

// LearnedSource is what a Source that has throttles offers too: their
// learned blocks, fleet-wide, and a way to lift them.
type LearnedSource interface {
	LearnedBlocks(ctx context.Context) ([]LearnedBlock, error)
	// LiftLearned lifts, in every process, the learned blocks of scope
	// that hold the subject of ruleID whose fingerprint is ref; it
	// reports whether any was listed.
	LiftLearned(ctx context.Context, scope, ruleID, ref string) (bool, error)
}
