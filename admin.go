package slidelimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/admin"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/registry"
	"github.com/slidelimit/slidelimit/internal/tally"
	"github.com/slidelimit/slidelimit/internal/throttle"
	"github.com/slidelimit/slidelimit/role"
)

// AdminHandler returns the operator's page and JSON API: the most denied
// subjects fleet-wide, active blocks, rule overrides, throttles and one
// subject's usage, and a POST that lifts a block. It serves only callers
// whose identity (WithIdentity, or role.NewContext) holds one of roles:
// 401 without identity, 403 without a role. See docs/operations.md for
// what it shows and masks.
//
// When the Limiter declares roles (WithRoles), a role among roles that it
// does not declare is a configuration error: AdminHandler logs it, a
// *ConfigError, at error level, and the handler answers every request 500.
func (l *Limiter) AdminHandler(roles ...role.Role) http.Handler {
	log := l.engine.Logger()
	if l.roles != nil {
		if r, bad := l.roles.Undeclared(roles); bad {
			err := configError("", "", "", fmt.Errorf("%sAdminHandler: role %q is not declared (declared roles: %s)", prefix, r, l.roles.List()))
			log.Error("slidelimit: AdminHandler refused; it answers 500", "error", err)
			return http.HandlerFunc(adminMisconfigured)
		}
	}
	return l.identify(admin.New(adminSource{l}, admin.Config{Log: log, Masked: l.masked}, roles...))
}

// adminMisconfigured answers a request to an AdminHandler given a role
// that is not declared.
func adminMisconfigured(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusInternalServerError)
	io.WriteString(w, `{"type":"about:blank","title":"Internal Server Error","status":500,`+
		`"detail":"the operator's page names a role that is not declared; see the server's log"}`+"\n")
}

// adminSource is the Limiter as internal/admin reads it.
type adminSource struct{ l *Limiter }

var (
	_ admin.Source        = adminSource{}
	_ admin.LearnedSource = adminSource{}
)

func (s adminSource) TopDenied(ctx context.Context, since time.Duration, n int) ([]tally.Denials, error) {
	return s.l.tally.TopDenied(ctx, since, n)
}

// Routes lists the scopes registered with a known scope, and an override's
// scope, with the IDs of their rules in first-seen order.
func (s adminSource) Routes() []admin.Route { return s.l.reg.Routes() }

func (s adminSource) Peek(ctx context.Context, scope, ruleID, subject string) (engine.Decision, error) {
	d, err := s.l.Peek(ctx, scope, ruleID, subject, false)
	return d, badInput(err)
}

func (s adminSource) PeekByIP(ctx context.Context, scope, ruleID, addr string) (engine.Decision, error) {
	d, err := s.l.Peek(ctx, scope, ruleID, addr, true)
	return d, badInput(err)
}

func (s adminSource) Reset(ctx context.Context, scope, ruleID, subject string) error {
	return badInput(s.l.Reset(ctx, scope, ruleID, subject, false))
}

func (s adminSource) ResetByIP(ctx context.Context, scope, ruleID, addr string) error {
	return badInput(s.l.Reset(ctx, scope, ruleID, addr, true))
}

func (s adminSource) PeekStored(ctx context.Context, scope, ruleID, stored string, hashed bool) (engine.Decision, error) {
	req, err := s.l.reg.Stored(scope, ruleID, stored, hashed)
	if err != nil {
		return engine.Decision{}, badInput(unknown(err))
	}
	return s.l.engine.Peek(ctx, req)
}

func (s adminSource) ResetStored(ctx context.Context, scope, ruleID, stored string, hashed bool) error {
	req, err := s.l.reg.Stored(scope, ruleID, stored, hashed)
	if err != nil {
		return badInput(unknown(err))
	}
	return s.l.resetChecks(ctx, req)
}

func (s adminSource) Overrides(ctx context.Context) ([]admin.Override, error) {
	_, o, err := s.l.RuleOverrides(ctx)
	if errors.Is(err, errOverridesOff) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]admin.Override, len(o))
	for i, ov := range o {
		out[i] = admin.Override(ov)
	}
	return out, nil
}

// Throttles lists the Limiter's throttles for the page, in creation order.
func (s adminSource) Throttles() []admin.Throttle {
	s.l.mu.RLock()
	ts := slices.Clone(s.l.throttles)
	s.l.mu.RUnlock()
	out := make([]admin.Throttle, len(ts))
	for i, th := range ts {
		t := th.Stats()
		out[i] = admin.Throttle{Name: t.Name, Rules: t.Rules, Waiting: t.Waiting,
			WaitP50: t.WaitP50.Seconds(), WaitP99: t.WaitP99.Seconds(), Admitted: t.Admitted,
			Active: t.Active, Upstream429s: t.Upstream429s}
		for _, c := range t.Classes {
			out[i].Classes = append(out[i].Classes, admin.ThrottleClass{Class: c.Class, Waiting: c.Waiting,
				WaitP50: c.WaitP50.Seconds(), WaitP99: c.WaitP99.Seconds(), Admitted: c.Admitted, Upstream429s: c.Upstream429s})
		}
	}
	return out
}

// LearnedBlocks lists the blocks the Limiter's throttles learned from
// their upstreams, fleet-wide.
func (s adminSource) LearnedBlocks(ctx context.Context) ([]admin.LearnedBlock, error) {
	s.l.mu.RLock()
	ts := make([]*throttle.Throttle, len(s.l.throttles))
	for i, t := range s.l.throttles {
		ts[i] = t.t
	}
	s.l.mu.RUnlock()
	return throttle.LearnedBlocksOf(ctx, ts)
}

// LiftLearned lifts the learned blocks of throttle scope that hold the
// subject of ruleID whose fingerprint is ref.
func (s adminSource) LiftLearned(ctx context.Context, scope, ruleID, ref string) (bool, error) {
	ts := s.l.throttlesNamed(scope)
	if len(ts) == 0 {
		return false, nil
	}
	id, ok := registry.ParseRuleID(ruleID)
	if !ok {
		return false, badInput(configError("", "", "", fmt.Errorf("%w %q", registry.ErrUnknownRule, ruleID)))
	}
	return ts[0].t.LiftRef(ctx, id, ref)
}

// badInput marks the errors of input that names no windows for the admin
// handler, which answers them 400.
func badInput(err error) error {
	if errors.Is(err, registry.ErrUnknownScope) || errors.Is(err, registry.ErrUnknownRule) || errors.Is(err, lifecycle.ErrSubject) {
		return &admin.BadInputError{Err: err}
	}
	return err
}
