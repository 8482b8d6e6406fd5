// Package admin serves the operator's view of a slidelimit Limiter: who is
// denied most, fleet-wide, in the last minute, five minutes and hour; who
// is blocked and for how long; the rule overrides in force; one subject's
// usage in every window of every registered route; and a way to lift a
// block. Applications get the handler from slidelimit.Limiter.AdminHandler
// and mount it under any prefix with http.StripPrefix:
//
//	mux.Handle("/admin/ui/", http.StripPrefix("/admin/ui", lim.AdminHandler("superadmin")))
//
// Routes, relative to the prefix:
//
//	GET  /                         the page (html/template, no script, no external asset)
//	GET  /api/top?since=1m|5m|1h   {"since":"1h","top":[{"scope","limiter","subject","denied"}, ...]}
//	GET  /api/subject?subject=S    S's usage across routes (or ?ip=A: what was counted by address A)
//	GET  /api/blocks               the active blocks, and the throttles' blocks learned from their upstreams
//	GET  /api/throttles            {"throttles":[{"name","rules","waiting","wait_p50","wait_p99","admitted","active","upstream_429s"}, ...]}
//	GET  /api/regions              {"regions":[{"name","lag","queue","dropped","reachable"}, ...]}: the peer regions
//	POST /api/reset                scope, limiter, subject (or ip, or ref): lifts the block, clears the windows
//
// The subjects of the kinds in Config.Masked (header values, by default of
// slidelimit.Limiter: API keys) are shown, sent and logged by their
// fingerprint only, and reset by ref (see mask.go).
//
// The caller's identity comes from role.NewContext: none is answered 401,
// an identity with none of the handler's roles 403 (with no roles, the
// handler serves no one). Bad input is answered 400 with an RFC 9457
// problem body; a Redis failure 503, without its details, which are logged
// (one line per 10 s, however many requests fail).
// POST /api/reset refuses cross-origin browser requests
// (http.CrossOriginProtection), so the page's forms cannot be submitted
// from another site, and logs every reset with who made it.
package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/logevery"
	"github.com/slidelimit/slidelimit/internal/tally"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// Source is what the handler reads and resets; slidelimit.Limiter
// provides it. Its methods must be safe for concurrent use.
type Source interface {
	// TopDenied is tally.Tallies.TopDenied.
	TopDenied(ctx context.Context, since time.Duration, n int) ([]tally.Denials, error)
	// Routes lists the registered scopes and their rule IDs.
	Routes() []Route
	// Peek and PeekByIP are slidelimit.Limiter.Peek without and with byIP.
	Peek(ctx context.Context, scope, ruleID, subject string) (engine.Decision, error)
	PeekByIP(ctx context.Context, scope, ruleID, addr string) (engine.Decision, error)
	// Reset and ResetByIP are slidelimit.Limiter.Reset without and with byIP.
	Reset(ctx context.Context, scope, ruleID, subject string) error
	ResetByIP(ctx context.Context, scope, ruleID, addr string) error
	// PeekStored and ResetStored are Peek and Reset of a subject as the
	// engine stores it (tally.Denials): the middleware's encoding of a
	// value ("header:k", "ip:192.0.2.7" for a request counted by address),
	// or, hashed, its stored hash (engine.Check.Hashed).
	PeekStored(ctx context.Context, scope, ruleID, stored string, hashed bool) (engine.Decision, error)
	ResetStored(ctx context.Context, scope, ruleID, stored string, hashed bool) error
	// Overrides lists the rule overrides in force.
	Overrides(ctx context.Context) ([]Override, error)
}

// Route is a registered scope and the IDs of its rules.
type Route struct {
	Scope string   `json:"scope"`
	Rules []string `json:"limiters"`
}

// Override is a rule override in force.
type Override struct {
	Scope string `json:"scope"`
	Rules string `json:"rules"`
}

// BadInputError is returned by a Source for input that names nothing it
// knows (an unknown scope or rule, a value that is no subject); the
// handler answers it with 400. Sources wrap it around their own errors.
type BadInputError struct{ Err error }

func (e *BadInputError) Error() string { return e.Err.Error() }
func (e *BadInputError) Unwrap() error { return e.Err }

// Views are the periods of GET /api/top and of the page.
var Views = []string{"1m", "5m", "1h"}

// TopN is the number of entries of each view.
const TopN = 50

// Config is what New needs besides its Source.
type Config struct {
	// Log receives the resets and the errors (nil discards them).
	Log *slog.Logger
	// Masked lists the kinds whose subjects the handler never shows,
	// sends or logs but by their fingerprint.
	Masked []rules.Kind
}

// handler is the admin handler. It is safe for concurrent use.
type handler struct {
	src    Source
	log    *slog.Logger
	masked []rules.Kind
	roles  []role.Role
	mux    *http.ServeMux
	// storeLog keeps the store's failures, which come with every view of
	// an outage, to one warning per storeLogEvery.
	storeLog logevery.Gate
}

// storeLogEvery is the least time between two warnings about the store's
// failures, as for the engine's and the middleware's.
const storeLogEvery = 10 * time.Second

// New returns the admin handler of src for callers with one of roles.
func New(src Source, cfg Config, roles ...role.Role) http.Handler {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &handler{src: src, log: log, masked: slices.Clone(cfg.Masked), roles: slices.Clone(roles), mux: http.NewServeMux(),
		storeLog: logevery.Gate{Every: storeLogEvery}}
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.HandleFunc("GET /api/top", h.top)
	h.mux.HandleFunc("GET /api/subject", h.subject)
	h.mux.HandleFunc("GET /api/blocks", h.blocks)
	h.mux.HandleFunc("GET /api/throttles", h.throttlesAPI)
	h.mux.HandleFunc("GET /api/regions", h.regionsAPI)
	h.mux.Handle("POST /api/reset", http.NewCrossOriginProtection().Handler(http.HandlerFunc(h.reset)))
	return h
}

// ServeHTTP checks the caller, then serves the route.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := role.FromContext(r.Context())
	if !ok || id.User == "" && len(id.Roles) == 0 {
		problem(w, http.StatusUnauthorized, "authentication required")
		return
	}
	if !slices.ContainsFunc(h.roles, id.Has) {
		problem(w, http.StatusForbidden, "this page needs an operator role")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

// problemBody is an RFC 9457 problem details object.
type problemBody struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// problem writes status with an application/problem+json body.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(problemBody{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail})
}

// writeJSON writes v as the 200 answer.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers err: 400 with its text for bad input, otherwise 503 with
// nothing of it (it is logged).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, op string, err error) {
	var bad *BadInputError
	if errorsAs(err, &bad) {
		problem(w, http.StatusBadRequest, bad.Error())
		return
	}
	h.storeFailed(op, err, slog.String("path", r.URL.Path))
	problem(w, http.StatusServiceUnavailable, "the rate limiter's store did not answer; try again")
}

// storeFailed logs that op failed with err, a failure of the store, at most
// once per storeLogEvery, with the number of failures left unlogged since
// the last line.
func (h *handler) storeFailed(op string, err error, attrs ...slog.Attr) {
	ok, suppressed := h.storeLog.Allow(time.Now())
	if !ok {
		return
	}
	attrs = append([]slog.Attr{slog.Any("error", err)}, attrs...)
	if suppressed > 0 {
		attrs = append(attrs, slog.Int64("suppressed", suppressed))
	}
	h.log.LogAttrs(context.Background(), slog.LevelWarn, "admin: "+op+" failed", attrs...)
}
