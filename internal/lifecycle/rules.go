package lifecycle

import (
	"cmp"
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/logevery"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// Decider makes rate-limit decisions; *engine.Engine implements it.
type Decider interface {
	Allow(ctx context.Context, req engine.Request) (engine.Decision, error)
}

// Finisher is the one finish seam: it ends an admitted request once its
// handler has run — gives it back, settles its costs, releases its slots —
// without making the response wait for Redis. *engine.Engine implements it
// (engine.Engine.FinishAsync), whose errors go to its own log and counter:
// the response has gone. A decider that wants to finish synchronously
// implements it by calling engine.Engine.Finish.
type Finisher interface {
	FinishAsync(d engine.Decision, o engine.Outcome)
}

// Transport is what every group of one transport instance shares: one
// net/http middleware, or one grpclimit.Limiter with a group per method.
// Set its fields, then use it only through NewRules; it must not be
// copied after that.
type Transport struct {
	Decider Decider
	Policy  role.Policy
	IP      ClientIP
	Settle  map[string]Settle
	Logger  *slog.Logger
	Hooks   []func(Event)
	// Limits are the limit functions of the options (WithLimitFunc), which
	// the root package's throttles call; the rules read them elsewhere.
	Limits map[string]func(context.Context) (int64, error)
	// Noun names what the transport limits in log lines: "request" or
	// "call".
	Noun string
	// Quotas makes a 429's Verdict list the windows the request does not
	// fit in (Verdict.Quotas), which gRPC status details name.
	Quotas bool
	// NoFinish is what NewRules reports for a group with work after the
	// handler whose Decider cannot finish requests; nil is ErrNoFinish.
	// Package middleware's options set its *ConfigError.
	NoFinish error

	// backendLog keeps backend errors, which come with every request of an
	// outage, to one warning per backendLogEvery.
	backendLog logevery.Gate
}

// backendLogEvery is the least time between two warnings about backend
// errors of one transport instance.
const backendLogEvery = 10 * time.Second

// Rules is one rule group compiled for a transport: its plans, what its
// requests need after the handler, and the Transport it belongs to. It is
// immutable and safe for concurrent use.
type Rules struct {
	t        *Transport
	group    rules.Group
	defaults *Plan
	byRole   map[string]*Plan
	shadow   bool
	distinct bool
	zone     *time.Location
	// counts reports whether an outcome's status stays counted; nil for a
	// group without count:, whose requests are never given back.
	counts   func(status int) bool
	finisher Finisher // t.Decider as a Finisher; nil when it is not one
	plan     func(role string, p *Plan) error
	msg      messages
}

// NewRules compiles g for t. counts reports whether a status of the
// transport's (an HTTP status, a gRPC code) is listed in g's count:
// statement. plan, when not nil, is called with every plan NewRules makes,
// for the transport to check it and attach what it keeps per plan
// (Plan.Transport). NewRules fails with t.NoFinish when g has work after
// the handler and t's decider cannot finish requests, and with plan's
// errors.
func NewRules(t *Transport, g rules.Group, zone *time.Location, counts func(status int) bool, plan func(role string, p *Plan) error) (*Rules, []error) {
	r := &Rules{t: t, group: g, byRole: make(map[string]*Plan, len(g.RoleRules)), shadow: g.Mode == rules.Shadow,
		distinct: g.Distinct != "", zone: zone, plan: plan, msg: messagesFor(t.Noun)}
	if len(g.Count) > 0 {
		r.counts = counts
	}
	var errs []error
	if len(g.Shares) > 0 {
		errs = append(errs, shareError(g))
	}
	t.backendLog.Every = backendLogEvery
	r.finisher, _ = t.Decider.(Finisher)
	if t.Decider != nil && r.finisher == nil && (len(g.Count) > 0 || HoldsSlots(&g) || len(t.Settle) > 0) {
		errs = append(errs, cmp.Or(t.NoFinish, ErrNoFinish))
	}
	for role, ls := range Lists(&g) {
		if _, dup := r.byRole[role]; dup && role != "" {
			continue // role.Policy.Resolve picks a role's first role(...)= rules
		}
		p, err := r.newPlan(role, ls)
		switch {
		case err != nil:
			errs = append(errs, err)
		case role == "":
			r.defaults = p
		default:
			r.byRole[role] = p
		}
	}
	return r, errs
}

// newPlan makes the plan of one rule list.
func (r *Rules) newPlan(role string, ls []rules.Rule) (*Plan, error) {
	p := NewPlan(ls)
	p.SettleWith(r.t.Settle)
	if r.plan != nil {
		if err := r.plan(role, p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// planFor returns the plan of a resolution.
func (r *Rules) planFor(res role.Resolution) *Plan {
	if res.Role == "" {
		return r.defaults
	}
	if p, ok := r.byRole[string(res.Role)]; ok {
		return p
	}
	// Unreachable with role.Policy, which only returns roles of the group's
	// role rules; an ad hoc plan keeps serving correct if that changes.
	if p, err := r.newPlan(string(res.Role), res.Rules); err == nil {
		return p
	}
	return r.defaults
}

// givesBack is the one give-back predicate: a request of a group with a
// count: statement is given back when its outcome is known and its status
// is not listed. A handler that panicked or hijacked the connection leaves
// the request counted: its outcome is unknown, and counting it errs on the
// side of denying.
func (r *Rules) givesBack(o Outcome) bool {
	return r.counts != nil && !o.Unknown && !r.counts(o.Status)
}

// emit gives ev to the hooks.
func (t *Transport) emit(ev Event) {
	for _, h := range t.Hooks {
		h(ev)
	}
}

// logBackend is the one backend-error log: at most one warning per
// backendLogEvery, carrying the number of errors held back since the last
// one (hooks see every request's error in its Event). An error of a
// request whose client went away is logged at debug level, not throttled.
func (t *Transport) logBackend(ctx context.Context, scope string, dec *engine.Decision, err error) {
	if ctx.Err() != nil {
		// The client went away; the backend error is a consequence.
		t.Logger.LogAttrs(ctx, slog.LevelDebug, "slidelimit: rate-limit backend error",
			slog.String("scope", scope), slog.String("source", dec.Source),
			slog.Bool("allowed", dec.Allowed), slog.Any("error", err))
		return
	}
	ok, held := t.backendLog.Allow(time.Now())
	if !ok {
		return
	}
	t.Logger.LogAttrs(ctx, slog.LevelWarn, "slidelimit: rate-limit backend error",
		slog.String("scope", scope), slog.String("source", dec.Source),
		slog.Bool("allowed", dec.Allowed), slog.Any("error", err),
		slog.Int64("errors_not_logged", held))
}

// messages are the log lines of one transport, naming what it limits.
type messages struct {
	noScope, cost, limit, oversized, shadow string
}

func messagesFor(noun string) messages {
	if noun == "" {
		noun = "request"
	}
	return messages{
		noScope:   "slidelimit: no scope for " + noun + "; set a scope: statement, WithScope or WithScopeFunc",
		cost:      "slidelimit: cost function failed; " + noun + " not counted",
		limit:     "slidelimit: limit function failed; " + noun + " not counted",
		oversized: "slidelimit: " + noun + " costs more than a whole quota",
		shadow:    "slidelimit: shadow mode would deny " + noun,
	}
}

// shareError refuses the share(CLASS):P% statements of g, a route's
// group: shares divide a throttle's admissions between classes of calls
// waiting for them, and a route's requests neither wait nor have a class.
func shareError(g rules.Group) error {
	text := g.String()
	s := g.Shares[0].String()
	return &rules.Error{Input: text, Offset: strings.Index(text, s), Reason: s + " divides a throttle's admissions between classes of waiting calls; " +
		"a route's requests do not wait (share: is for Limiter.Throttle)"}
}
