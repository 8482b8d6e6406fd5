// Package throttle holds the machinery of the root package's Throttle:
// lanes of waiting callers, the fleet-wide turn order and its script,
// learned blocks, permits, plans, statistics and the Transport's
// settlement. The root package keeps the face users import and delegates
// here; docs/throttle.md describes the design.
package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/overrides"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// Causes of a call's errors, which the root package reports as
// ConfigErrors of kind "call" and "never-fits", and of a rule group that
// has no meaning for calls out.
var (
	ErrCall      = errors.New("slidelimit: call lacks a value the throttle needs")
	ErrNeverFits = errors.New("slidelimit: call can never fit")
	ErrRules     = errors.New("slidelimit: statement not allowed in a throttle")
)

// Config is what a Throttle is made of.
type Config struct {
	// Name is the throttle's name, the scope of its windows.
	Name string
	// Engine decides; Client is its Redis client, for the turn order.
	Engine *engine.Engine
	Client engine.Client
	// Limits are the limit functions, by name (WithLimitFunc).
	Limits map[string]func(context.Context) (int64, error)
	// Hooks receive an event for every decision.
	Hooks []func(middleware.Event)
	// MaxHold is the longest a Permit holds its slots unfinished; <= 0
	// means DefaultMaxHold.
	MaxHold time.Duration
	// Overrides follows SetRules on the scope; nil with overrides off.
	Overrides *overrides.Store
	// Transit is the transit bound: the longest a call takes from its
	// admission to the upstream, which the windows allow for; 0 means the
	// upstream counts a call when it is sent (docs/throttle.md).
	Transit time.Duration
	// ConfigError turns a call's error (ErrCall, ErrNeverFits) into the
	// error the caller sees.
	ConfigError func(error) error
}

// DefaultMaxHold is the maximum hold of a Permit's in-flight slots
// without Config.MaxHold.
const DefaultMaxHold = 10 * time.Minute

// A Throttle holds the calls of a fleet under an upstream's limits.
type Throttle struct {
	cfg    Config
	eng    *engine.Engine
	client engine.Client
	parts  bool // the engine may split a request across servers
	name   string
	code   *Plan                    // the plan of the rules the code declared
	sw     *overrides.Switch[*Plan] // follows SetRules on the scope; nil with overrides off
	fleet  *fleet                   // the fleet-wide order of waiters
	hooks  []func(middleware.Event) // the decision hooks
	limits map[string]func(context.Context) (int64, error)

	maxHold time.Duration // the longest a Permit holds its slots unfinished
	warn    permitWarnings

	mu    sync.Mutex
	lanes map[string]*lane

	byID map[string]*lane // the lanes by id, for the fleet's messages
	reg  laneRegistry     // the idle and held lanes (lanes.go); mu guards it

	blockCap atomic.Int64 // the largest MaxBlock of t's Transports; 0 none

	stats stats
}

// Call is one call: the values of its key(NAME) rules and the
// estimates of its named costs, by name.
type Call struct {
	Keys   map[string]string
	Costs  map[string]int64
	Class  string
	Tenant string
}

// New returns the throttle of cfg enforcing g, which overrides.Group
// parsed. A group with statements that have no meaning for calls out is
// an error wrapping ErrRules.
func New(cfg Config, g rules.Group) (*Throttle, error) {
	if cfg.MaxHold <= 0 {
		cfg.MaxHold = DefaultMaxHold
	}
	if cfg.ConfigError == nil {
		cfg.ConfigError = func(err error) error { return err }
	}
	t := &Throttle{cfg: cfg, eng: cfg.Engine, client: cfg.Client, name: cfg.Name, hooks: cfg.Hooks,
		limits: cfg.Limits, lanes: map[string]*lane{}, byID: map[string]*lane{}, maxHold: cfg.MaxHold}
	_, single := cfg.Client.(*redis.Client)
	t.parts = !single
	t.warn.dropped.Every, t.warn.held.Every = permitWarnEvery, permitWarnEvery
	var err error
	if t.code, err = t.Compile(g); err != nil {
		return nil, err
	}
	t.fleet = newFleet(t)
	if cfg.Overrides != nil {
		t.sw = overrides.NewSwitch(t.name, t.code, func(g rules.Group) (*Plan, error) {
			if err := t.declared(g); err != nil {
				return nil, err
			}
			return t.Compile(g)
		})
		cfg.Overrides.Add(t.sw)
	}
	return t, nil
}

// Close stops following the fleet's messages.
func (t *Throttle) Close() { t.fleet.close() }

// logger is the engine's logger.
func (t *Throttle) logger() *slog.Logger { return t.eng.Logger() }

// declared refuses an override g with a key(NAME) rule or a named
// cost that the code's rules do not have: the callers give values and
// estimates only for the code's, so every call would fail.
func (t *Throttle) declared(g rules.Group) error {
	keys, costs := map[string]bool{}, map[string]bool{}
	for _, l := range t.code.g.Rules {
		if l.Kind == rules.Key {
			keys[l.Name] = true
		}
		costs[l.Cost] = true
	}
	for _, l := range g.Rules {
		switch {
		case l.Kind == rules.Key && !keys[l.Name]:
			return fmt.Errorf("%w: throttle %q: limiter %s: the throttle's callers give no value for key %q (its code declares %s)",
				ErrRules, t.name, l.ID(), l.Name, t.code.g.String())
		case l.Cost != "" && !lifecycle.IsDecimal(l.Cost) && !costs[l.Cost]:
			return fmt.Errorf("%w: throttle %q: limiter %s: the throttle's callers give no estimate of cost %q (its code declares %s)",
				ErrRules, t.name, l.ID(), l.Cost, t.code.g.String())
		}
	}
	return nil
}

// Name returns the throttle's name, the scope of its windows.
func (t *Throttle) Name() string { return t.name }

// plan returns the plan in force: the code's, or an override's.
func (t *Throttle) plan() *Plan {
	if t.sw != nil {
		return t.sw.Current()
	}
	return t.code
}

// Request returns the engine request of c under the plan in force, as
// Wait would ask it.
func (t *Throttle) Request(ctx context.Context, c Call) (engine.Request, error) {
	req, _, err := t.plan().request(ctx, c)
	return req, err
}

// Allow admits c at once if every window has room for it, without
// waiting and without passing callers that wait for the same subjects.
// It returns nil and false when c must wait; errors are those of Wait.
func (t *Throttle) Allow(ctx context.Context, c Call) (*Permit, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	p := t.plan()
	req, names, err := p.request(ctx, c)
	if err != nil {
		return nil, false, err
	}
	if p.hold(time.Now()) > 0 {
		return nil, false, nil // a calendar period ends within the transit bound
	}
	ln, err := t.lane(ctx, laneKey(&req))
	if err != nil {
		return nil, false, err
	}
	ln.note(&req)
	if ln.busy() {
		t.release(ln)
		return nil, false, nil
	}
	d, err := t.decide(ctx, &req)
	if err != nil && !d.Allowed {
		t.release(ln)
		return nil, false, err
	}
	if !d.Allowed {
		ln.learn(d)
		t.release(ln)
		return nil, false, nil
	}
	t.stats.admits.Add(1)
	pm := t.newPermit(&req, d, names, ln)
	if pm.class = t.classStats(p, c.Class); pm.class != nil {
		pm.class.admits.Add(1)
	}
	return pm, true, nil
}

// maxCost is the most check i may be settled to: the smallest limit of
// its windows that count costs (in-flight windows count calls).
func (p *Permit) maxCost(i int) int64 {
	m := int64(math.MaxInt64)
	for _, ws := range p.d.Windows {
		if ws.Check == i && !ws.Window.Concurrent && ws.Window.Limit > 0 {
			m = min(m, ws.Window.Limit)
		}
	}
	return m
}

// Decision returns the engine's decision that admitted the call.
func (p *Permit) Decision() engine.Decision { return p.d }

// decide asks the engine to admit req and reports the decision to the
// hooks and statistics.
func (t *Throttle) decide(ctx context.Context, req *engine.Request) (engine.Decision, error) {
	start := time.Now()
	d, err := t.eng.Allow(ctx, *req)
	t.fleet.clock(d.Time, start)
	t.stats.calls.Add(1)
	t.emit(req, d, err, time.Since(start))
	return d, err
}

// tooBig reports a check whose cost is above the limit of one of its
// windows: an error wrapping ErrNeverFits, naming the window as declared
// before stretch under transit bound d.
func tooBig(req *engine.Request, d time.Duration) error {
	for _, c := range req.Checks {
		cost := max(c.Cost, 1)
		for _, w := range c.Windows {
			if !w.Concurrent && cost > w.Limit {
				return fmt.Errorf("%w: cost %s of limiter %s is above the limit of its window %s",
					ErrNeverFits, strconv.FormatInt(cost, 10), c.Rule.ID(), declared(w, d).String())
			}
		}
	}
	return nil
}
