package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// admin serves GET and DELETE /admin/limits: a super-admin looks at, or
// resets, the windows one subject has in one scope.
//
//	GET    /admin/limits?scope=GET /files/{id}&kind=user&subject=alice
//	GET    /admin/limits?scope=GET /files/{id}&kind=user&ip=127.0.0.1
//	DELETE /admin/limits?scope=GET /files/{id}&kind=user&subject=alice
//
// scope is a route pattern (or a scope: name), kind a rule ID (ip, user,
// global, header(X-Api-Key), ...), subject the raw value that rule
// counts: a user id, an address for ip, nothing for global. ip= instead of
// subject= asks for the requests the rule counted by client address —
// for user, those of anonymous callers and of roles counted by IP; for ip
// rules both forms are the same. GET is a peek: it never counts.
type admin struct {
	lim    *slidelimit.Limiter
	logger *slog.Logger
}

// target is what a request to /admin/limits names.
type target struct {
	Scope   string `json:"scope"`
	Kind    string `json:"kind"`
	Subject string `json:"subject,omitempty"`
	IP      string `json:"ip,omitempty"`
}

// value is what Peek and Reset are given: the client address when the
// target names one, else the subject.
func (t target) value() string {
	if t.IP != "" {
		return t.IP
	}
	return t.Subject
}

// windowView is one window in the response. Times are in seconds.
type windowView struct {
	Policy    string  `json:"policy"`
	Limit     int64   `json:"limit"`
	Period    float64 `json:"period,omitempty"` // none for an in-flight window
	Used      int64   `json:"used"`
	Remaining int64   `json:"remaining"`
	Reset     float64 `json:"reset"`
}

type peekView struct {
	target
	// Allowed says whether one more request would fit in every window
	// listed, which may be stricter than a given caller's limits when the
	// defaults and role rules declare different windows.
	Allowed bool `json:"allowed"`
	// Blocked, when not zero, is the time in seconds the subject stays
	// blocked (a block: statement).
	Blocked float64      `json:"blocked,omitempty"`
	Windows []windowView `json:"windows"`
}

func (a *admin) peek(w http.ResponseWriter, r *http.Request) {
	t, ok := a.target(w, r)
	if !ok {
		return
	}
	d, err := a.lim.Peek(r.Context(), t.Scope, t.Kind, t.value(), t.IP != "")
	if err != nil {
		a.fail(w, r, t, err)
		return
	}
	// The ID was accepted by Peek, so it parses; the canonical one names
	// the policies as the RateLimit-Policy field does.
	lim := rules.Rule{Kind: rules.Kind(t.Kind)}
	if g, err := rules.Parse(t.Kind + ":1/s"); err == nil && len(g.Rules) == 1 {
		lim = g.Rules[0]
	}
	v := peekView{target: t, Allowed: d.Allowed, Windows: make([]windowView, 0, len(d.Windows))}
	if d.Blocked {
		v.Blocked = seconds(d.RetryAfter)
	}
	for _, ws := range d.Windows {
		v.Windows = append(v.Windows, windowView{
			Policy:    lifecycle.PolicyName(lim, ws.Window),
			Limit:     ws.Window.Limit,
			Period:    seconds(ws.Window.Period),
			Used:      ws.Used,
			Remaining: ws.Remaining,
			Reset:     seconds(ws.Reset),
		})
	}
	writeJSON(w, http.StatusOK, v)
}

func (a *admin) reset(w http.ResponseWriter, r *http.Request) {
	t, ok := a.target(w, r)
	if !ok {
		return
	}
	if err := a.lim.Reset(r.Context(), t.Scope, t.Kind, t.value(), t.IP != ""); err != nil {
		a.fail(w, r, t, err)
		return
	}
	who := slog.String("subject", t.Subject)
	if t.IP != "" {
		who = slog.String("ip", t.IP)
	}
	a.logger.LogAttrs(r.Context(), slog.LevelInfo, "windows reset", slog.String("by", caller(r)),
		slog.String("scope", t.Scope), slog.String("kind", t.Kind), who)
	writeJSON(w, http.StatusOK, struct {
		target
		Reset bool `json:"reset"`
	}{t, true})
}

// target checks the caller and reads the query; when either is wrong it
// answers the request itself and returns false.
func (a *admin) target(w http.ResponseWriter, r *http.Request) (target, bool) {
	if !requireRole(w, r, roleSuperadmin) {
		return target{}, false
	}
	q := r.URL.Query()
	t := target{Scope: q.Get("scope"), Kind: q.Get("kind"), Subject: q.Get("subject"), IP: q.Get("ip")}
	switch {
	case t.Scope == "" || t.Kind == "":
		badRequest(w, `scope and kind are required, as in ?scope=GET /files/{id}&kind=user&subject=alice`)
	case t.Subject != "" && t.IP != "":
		badRequest(w, "give subject or ip, not both")
	default:
		return t, true
	}
	return target{}, false
}

// fail answers an error of Peek or Reset: the caller's mistakes with 400
// and a message written here, anything else with 503 and a log entry,
// because backend errors are not the client's business.
func (a *admin) fail(w http.ResponseWriter, r *http.Request, t target, err error) {
	ce := (*slidelimit.ConfigError)(nil)
	errors.As(err, &ce)
	switch {
	case ce != nil && ce.Kind == "scope":
		badRequest(w, fmt.Sprintf("unknown scope %q: give a route pattern such as %q", t.Scope, "GET /files/{id}"))
	case ce != nil && ce.Kind == "limiter":
		badRequest(w, fmt.Sprintf("no limiter %q in scope %q: give a rule ID of the route's rules, such as ip, user, global or header(X-Api-Key)", t.Kind, t.Scope))
	case errors.Is(err, lifecycle.ErrSubject) && t.IP != "":
		badRequest(w, fmt.Sprintf("limiter %q never counts by ip %q: give an IP address (global limiters never count by IP)", t.Kind, t.IP))
	case errors.Is(err, lifecycle.ErrSubject):
		badRequest(w, fmt.Sprintf("limiter %q never counts subject %q: ip limiters take an IP address, the other kinds but global a non-empty value", t.Kind, t.Subject))
	default:
		a.logger.LogAttrs(r.Context(), slog.LevelError, "admin limits: rate-limit store failed",
			slog.String("scope", t.Scope), slog.String("kind", t.Kind), slog.Any("error", err))
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "rate-limit store unavailable, try again"})
	}
}

func badRequest(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
}

// seconds converts d to seconds, to the millisecond.
func seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1000) / 1000
}
