package main

import (
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/slidelimit/slidelimit"
)

// maxRulesBody bounds the rule text a PUT /admin/rules may send.
const maxRulesBody = 4 << 10

// rules serves GET /admin/rules: the rule overrides in force.
//
//	GET    /admin/rules
//	PUT    /admin/rules?scope=GET /health     body: ip:1/s
//	DELETE /admin/rules?scope=GET /health
func (a *admin) rules(w http.ResponseWriter, r *http.Request) {
	if !requireRole(w, r, roleSuperadmin) {
		return
	}
	// The Limiter lists its overrides on its operator's page too.
	version, in, err := a.lim.RuleOverrides(r.Context())
	if err != nil {
		a.storeFailed(w, r, "", err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Version   int64                     `json:"version"`
		Overrides []slidelimit.RuleOverride `json:"overrides"`
	}{version, in})
}

// setRules serves PUT /admin/rules?scope=S: the body replaces the rules of
// scope S in every demo process that shares the Redis.
func (a *admin) setRules(w http.ResponseWriter, r *http.Request) {
	scope, ok := a.rulesScope(w, r)
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRulesBody))
	if err != nil {
		badRequest(w, "rule text too long or unreadable")
		return
	}
	text := string(body)
	if text == "" {
		// SetRules would clear the override: that is DELETE's job.
		badRequest(w, "the body holds the rules, as in ip:1/s; DELETE restores the code's")
		return
	}
	if err := a.lim.SetRules(r.Context(), scope, text); err != nil {
		if ce := (*slidelimit.ConfigError)(nil); errors.As(err, &ce) {
			// The caller's own text: its error names the position.
			badRequest(w, err.Error())
			return
		}
		a.storeFailed(w, r, scope, err)
		return
	}
	a.logger.LogAttrs(r.Context(), slog.LevelInfo, "rules overridden", slog.String("by", caller(r)),
		slog.String("scope", scope), slog.String("rules", text))
	writeJSON(w, http.StatusOK, map[string]string{"scope": scope, "rules": text})
}

// clearRules serves DELETE /admin/rules?scope=S: the code's rules apply
// to S again everywhere.
func (a *admin) clearRules(w http.ResponseWriter, r *http.Request) {
	scope, ok := a.rulesScope(w, r)
	if !ok {
		return
	}
	if err := a.lim.SetRules(r.Context(), scope, ""); err != nil {
		a.storeFailed(w, r, scope, err)
		return
	}
	a.logger.LogAttrs(r.Context(), slog.LevelInfo, "rules restored", slog.String("by", caller(r)), slog.String("scope", scope))
	writeJSON(w, http.StatusOK, map[string]any{"scope": scope, "cleared": true})
}

func (a *admin) rulesScope(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !requireRole(w, r, roleSuperadmin) {
		return "", false
	}
	scope := r.URL.Query().Get("scope")
	if scope == "" {
		badRequest(w, `scope is required, as in ?scope=GET /health`)
		return "", false
	}
	return scope, true
}

// storeFailed answers a Redis failure with 503; the error goes to the log.
func (a *admin) storeFailed(w http.ResponseWriter, r *http.Request, scope string, err error) {
	a.logger.LogAttrs(r.Context(), slog.LevelError, "admin rules: rule store failed", slog.String("scope", scope), slog.Any("error", err))
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "rule store unavailable, try again"})
}
