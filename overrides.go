package slidelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// Rule overrides replace, at run time and in every process that shares a
// Redis and a key prefix, the rule group that the code declared for a
// scope. They live in Redis under the prefix, in one hash tag so that a
// Redis Cluster keeps them in one slot:
//
//	prefix{rules}         hash: scope → canonical rule text
//	prefix{rules}version  counter, incremented with every change in the
//	                      same script call
//	prefix{rules}         also the pub/sub channel a change's new version
//	                      is published on
//
// Each Limiter loads them in New, applies every change it hears of on the
// channel, and checks the version every WithRulesCheck interval (and
// after its subscription reconnects) to catch a message it missed.

// DefaultRulesCheck is how often a Limiter checks the version of the rule
// overrides in Redis by default.
const DefaultRulesCheck = time.Second

// rulesTimeout bounds each Redis call about overrides, which are off the
// request path.
const rulesTimeout = time.Second

// Errors of SetRules and ClearRules.
var (
	// ErrOverrideScope means SetRules was given an empty scope, or rule
	// text whose scope: statement names another scope.
	ErrOverrideScope = errors.New("slidelimit: invalid override scope")
	// ErrOverridesOff means the Limiter was created with overrides off
	// (WithRulesCheck(0)), so it neither reads nor writes them.
	ErrOverridesOff = errors.New("slidelimit: rule overrides are off")
)

// Override is a rule group that replaces, in every process sharing the
// Redis and key prefix, the group the code declared for Scope.
type Override struct {
	// Scope is a route pattern given to Register or Handle ("GET
	// /files/{id}"), or a group's scope: name.
	Scope string `json:"scope"`
	// Rules is the group's canonical text (rules.Group.String), without
	// a scope: statement.
	Rules string `json:"rules"`
}

// Overrides lists the rule overrides in force, as of Version.
type Overrides struct {
	// Version counts the changes made to the overrides since they were
	// first stored under the prefix; 0 when none was ever made.
	Version int64 `json:"version"`
	// Overrides are the overrides, in scope order.
	Overrides []Override `json:"overrides"`
}

// Redis scripts of the overrides (KEYS: the hash, the version). A change
// and its version are written in one script, so a reader never sees one
// without the other. They run rarely, so they are sent with EVAL.
const (
	setRulesScript = `
if ARGV[2] == '' then
	redis.call('HDEL', KEYS[1], ARGV[1])
else
	redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
local v = redis.call('INCR', KEYS[2])
redis.call('PUBLISH', KEYS[1], v)
return v`
	loadRulesScript = `
return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1])}`
)

// eval runs script with the two keys first in args and the rest as its
// ARGV.
func eval(ctx context.Context, c engine.Client, script string, args ...string) *redis.Cmd {
	a := make([]any, 0, 3+len(args))
	a = append(a, "eval", script, 2)
	for _, s := range args {
		a = append(a, s)
	}
	cmd := redis.NewCmd(ctx, a...)
	_ = c.Process(ctx, cmd)
	return cmd
}

// ruleSet is one version of the overrides, as applied: immutable.
type ruleSet struct {
	version int64
	texts   map[string]string      // scope → canonical text
	groups  map[string]rules.Group // scope → parsed group (its scope: as written)
}

// slot is a handler whose rule group may be replaced while it serves: the
// request path loads the current handler with one atomic load.
type slot struct {
	scope string
	code  http.Handler // the handler with the group the code declared
	cur   atomic.Pointer[http.Handler]
	// build wraps the slot's next handler in middleware for g.
	build func(g rules.Group) (http.Handler, error)
}

// ServeHTTP serves r with the current handler.
func (s *slot) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*s.cur.Load()).ServeHTTP(w, r) }

func (s *slot) set(h http.Handler) { s.cur.Store(&h) }

// overrides is a Limiter's view of the rule overrides in Redis.
type overrides struct {
	client  engine.Client
	hash    string // the hash and the channel
	version string
	log     *slog.Logger
	every   time.Duration

	// syncMu serializes loads with their application, so that a load
	// applies after every load that read Redis before it.
	syncMu sync.Mutex
	mu     sync.Mutex // serializes applying a ruleSet and adding slots
	slots  map[string][]*slot
	cur    atomic.Pointer[ruleSet]

	down      atomic.Bool // the last Redis call failed; logged once
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newOverrides(client engine.Client, prefix string, every time.Duration, log *slog.Logger) *overrides {
	o := &overrides{
		client: client, hash: prefix + "{rules}", version: prefix + "{rules}version", log: log, every: every,
		slots: map[string][]*slot{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	o.cur.Store(&ruleSet{})
	return o
}

// start loads the overrides and starts the goroutine that follows them.
// A Redis that does not answer leaves the code's rules in force; the
// goroutine keeps trying.
func (o *overrides) start() {
	var ps *redis.PubSub
	if s, ok := o.client.(interface {
		Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	}); ok {
		// Subscribed before the load, so that a change after the load is
		// heard of.
		ps = s.Subscribe(context.Background(), o.hash)
	}
	o.sync(false)
	go o.follow(ps)
}

// follow applies the changes announced on the channel, and checks the
// version every o.every and after every (re)subscription, until close.
func (o *overrides) follow(ps *redis.PubSub) {
	defer close(o.done)
	events := make(chan bool, 1) // true: compare the version first
	if ps != nil {
		defer ps.Close()
		go o.receive(ps, events)
	}
	tick := time.NewTicker(o.every)
	defer tick.Stop()
	for {
		select {
		case <-o.stop:
			return
		case check := <-events:
			o.sync(check)
		case <-tick.C:
			o.sync(true)
		}
	}
}

// receive reads the subscription. A message is a new version; a
// resubscription (after a reconnect) may have missed some, so it asks for
// a version check. The first subscription came before New's load.
func (o *overrides) receive(ps *redis.PubSub, events chan<- bool) {
	ctx := context.Background()
	first := true
	for {
		msg, err := ps.Receive(ctx)
		if err != nil {
			select {
			case <-o.stop:
				return
			default:
			}
			time.Sleep(50 * time.Millisecond) // go-redis reconnects on the next Receive
			continue
		}
		check := true
		switch m := msg.(type) {
		case *redis.Subscription:
			if first {
				first = false
				continue
			}
		case *redis.Message:
			if v, err := strconv.ParseInt(m.Payload, 10, 64); err == nil && v == o.cur.Load().version {
				continue
			}
			check = false
		default:
			continue // a pong
		}
		select {
		case events <- check:
		default: // a sync is pending already
		}
	}
}

// sync loads the overrides from Redis and applies them; with check it
// first reads the version and loads only when it changed.
func (o *overrides) sync(check bool) {
	o.syncMu.Lock()
	defer o.syncMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), rulesTimeout)
	defer cancel()
	if check {
		v, err := redisInt(o.client, ctx, "get", o.version)
		if o.failed(err) || v == o.cur.Load().version {
			return
		}
	}
	res, err := eval(ctx, o.client, loadRulesScript, o.hash, o.version).Slice()
	if o.failed(err) {
		return
	}
	set, err := parseRuleSet(res)
	if o.failed(err) {
		return
	}
	o.apply(set)
}

// redisInt runs a command with an integer (or nil, 0) reply.
func redisInt(c engine.Client, ctx context.Context, args ...any) (int64, error) {
	cmd := redis.NewCmd(ctx, args...)
	_ = c.Process(ctx, cmd)
	v, err := cmd.Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return v, err
}

// failed logs the first of a run of Redis errors, and the recovery.
func (o *overrides) failed(err error) bool {
	if err != nil {
		if !o.down.Swap(true) {
			o.log.Warn("slidelimit: cannot read rule overrides from redis; the last known stay in force", "error", err)
		}
		return true
	}
	if o.down.Swap(false) {
		o.log.Info("slidelimit: rule overrides readable again")
	}
	return false
}

// parseRuleSet reads the reply of loadRulesScript. Texts that no longer
// parse (a newer library's syntax) are skipped with a log line by apply.
func parseRuleSet(res []any) (*ruleSet, error) {
	if len(res) != 2 {
		return nil, fmt.Errorf("slidelimit: rule overrides: unexpected reply %v", res)
	}
	vs, _ := res[0].(string)
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("slidelimit: rule overrides: version %q: %w", vs, err)
	}
	kv, _ := res[1].([]any)
	set := &ruleSet{version: v, texts: make(map[string]string, len(kv)/2), groups: make(map[string]rules.Group, len(kv)/2)}
	for i := 0; i+1 < len(kv); i += 2 {
		scope, _ := kv[i].(string)
		text, _ := kv[i+1].(string)
		set.texts[scope] = text
	}
	return set, nil
}

// apply makes set the overrides in force: every slot of a scope whose
// text changed gets the new group, or the code's when the override is
// gone. Each change is logged once.
func (o *overrides) apply(set *ruleSet) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// A version below the last one applied means the store was reset (a
	// FLUSHALL, a restart without persistence): what it holds now rules.
	old := o.cur.Load()
	scopes := slices.Sorted(maps.Keys(set.texts))
	for s := range old.texts {
		if _, ok := set.texts[s]; !ok {
			scopes = append(scopes, s)
		}
	}
	for _, scope := range scopes {
		text, ok := set.texts[scope]
		if ok {
			g, err := overrideGroup(scope, text)
			if err != nil {
				o.log.Error("slidelimit: rule override not applied: it does not parse", "scope", scope, "rules", text, "version", set.version, "error", err)
				delete(set.texts, scope)
				ok = false
			} else {
				set.groups[scope] = g
			}
		}
		if oldText, had := old.texts[scope]; had == ok && oldText == text {
			continue
		}
		if !ok {
			for _, s := range o.slots[scope] {
				s.set(s.code)
			}
			o.log.Info("slidelimit: rule override cleared; the code's rules apply", "scope", scope, "version", set.version)
			continue
		}
		o.install(scope, set.groups[scope], text, set.version)
	}
	o.cur.Store(set)
}

// install gives every slot of scope the middleware for g, logging the
// change once.
func (o *overrides) install(scope string, g rules.Group, text string, version int64) {
	var errs []error
	for _, s := range o.slots[scope] {
		h, err := s.build(g)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.set(h)
	}
	if len(errs) > 0 {
		o.log.Error("slidelimit: rule override not applied to some handlers of the scope", "scope", scope, "rules", text, "version", version, "error", errors.Join(errs...))
		return
	}
	o.log.Info("slidelimit: rule override applied", "scope", scope, "rules", text, "version", version, "handlers", len(o.slots[scope]))
}

// add registers s, applying the override of its scope if one is in force.
func (o *overrides) add(s *slot) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slots[s.scope] = append(o.slots[s.scope], s)
	if g, ok := o.cur.Load().groups[s.scope]; ok {
		if h, err := s.build(g); err == nil {
			s.set(h)
		} else {
			o.log.Error("slidelimit: rule override not applied to a new handler", "scope", s.scope, "error", err)
		}
	}
}

func (o *overrides) close() {
	o.closeOnce.Do(func() {
		close(o.stop)
		<-o.done
	})
}

// overrideGroup parses the rule text of an override of scope, as a limit
// tag is parsed: a scope: statement may only repeat scope. A slot gives
// the group the scope: name of its code's group (see follow), so that its
// windows stay those of the scope.
func overrideGroup(scope, text string) (rules.Group, error) {
	if scope == "" {
		return rules.Group{}, fmt.Errorf("%w: empty scope", ErrOverrideScope)
	}
	g, err := rules.Parse(text)
	if err != nil {
		return rules.Group{}, err
	}
	if g.Scope != "" && g.Scope != scope {
		return rules.Group{}, fmt.Errorf("%w: the rules say scope:%s, the override is for %q", ErrOverrideScope, g.Scope, scope)
	}
	return g, nil
}

// SetRules replaces the rule group of scope, in this process and in every
// process that shares the Redis and key prefix (engine.WithPrefix), with
// rulesText, written as in a limit tag. scope is a route pattern given to
// Register or Handle ("GET /files/{id}") or a scope: name; rulesText may
// omit the scope: statement, and may only repeat scope in it. The
// override is stored in Redis, so it survives restarts and applies to
// processes started later from their first request, until ClearRules.
//
// Every process applies it within about a second: at once when it hears
// of it on the pub/sub channel, else at its next version check
// (WithRulesCheck). Each logs the change once, with the engine's logger
// (engine.WithLogger). Requests already counted in the scope count under
// the new rules, because keys name the scope, limiter and subject, not the
// limits: lowering a limit below what a subject used denies until enough
// of its requests leave the window; raising it admits at once. A window
// longer than any the scope had sees only the requests still retained.
//
// rulesText is validated as a limit tag is (rules.Parse: errors are
// *rules.Error with the offset) and, in this process, by building the
// middleware of every handler of the scope (key, cost and limit functions
// must be registered); when it fails nothing is stored or changed. A
// process whose handlers cannot take it (a function registered only here)
// keeps its rules and logs an error. SetRules returns once Redis has
// stored the override and, unless Redis fails in between, this process
// applies it.
func (l *Limiter) SetRules(ctx context.Context, scope, rulesText string) error {
	if l.ov == nil {
		return ErrOverridesOff
	}
	g, err := overrideGroup(scope, rulesText)
	if err != nil {
		return err
	}
	// Build, do not install, the scope's handlers: a group this process
	// cannot serve is refused before anything is stored.
	l.ov.mu.Lock()
	slots := slices.Clone(l.ov.slots[scope])
	l.ov.mu.Unlock()
	for _, s := range slots {
		if _, err := s.build(g); err != nil {
			return err
		}
	}
	g.Scope = ""
	return l.ov.write(ctx, scope, g.String())
}

// ClearRules removes the override of scope, so that every process sharing
// the Redis and key prefix enforces the group its code declared again,
// within about a second (see SetRules). Removing an override that is not
// in force is not an error.
func (l *Limiter) ClearRules(ctx context.Context, scope string) error {
	if l.ov == nil {
		return ErrOverridesOff
	}
	if scope == "" {
		return fmt.Errorf("%w: empty scope", ErrOverrideScope)
	}
	return l.ov.write(ctx, scope, "")
}

// Rules returns the rule overrides in force as stored in Redis now (not
// as this process last applied them), in scope order. It fails when Redis
// does.
func (l *Limiter) Rules(ctx context.Context) (Overrides, error) {
	if l.ov == nil {
		return Overrides{}, ErrOverridesOff
	}
	res, err := eval(ctx, l.ov.client, loadRulesScript, l.ov.hash, l.ov.version).Slice()
	if err != nil {
		return Overrides{}, fmt.Errorf("slidelimit: rule overrides: %w", err)
	}
	set, err := parseRuleSet(res)
	if err != nil {
		return Overrides{}, err
	}
	out := Overrides{Version: set.version, Overrides: []Override{}}
	for _, s := range slices.Sorted(maps.Keys(set.texts)) {
		out.Overrides = append(out.Overrides, Override{Scope: s, Rules: set.texts[s]})
	}
	return out, nil
}

// write stores text as the override of scope ("" removes it), then loads
// and applies the overrides here, so that the change is in force in this
// process when SetRules returns.
func (o *overrides) write(ctx context.Context, scope, text string) error {
	if _, err := eval(ctx, o.client, setRulesScript, o.hash, o.version, scope, text).Int64(); err != nil {
		return fmt.Errorf("slidelimit: rule overrides: %w", err)
	}
	o.sync(false)
	return nil
}

// follow returns a handler serving code, the handler of the group the code
// declared for scope, until a rule override of scope replaces it with
// next wrapped in middleware for the override's group, built with the
// Limiter's options and then opts.
func (l *Limiter) follow(scope string, code, next http.Handler, opts []middleware.Option) http.Handler {
	s := l.newSlot(scope, code, next, opts)
	l.ov.add(s)
	return s
}

// join makes h, when route made it a slot, follow its scope's overrides.
func (l *Limiter) join(h http.Handler) {
	if s, ok := h.(*slot); ok {
		l.ov.add(s)
	}
}

// newSlot returns the slot of follow, not yet following.
func (l *Limiter) newSlot(scope string, code, next http.Handler, opts []middleware.Option) *slot {
	s := &slot{scope: scope, code: code}
	s.set(code)
	named := scope // a scope: name, or "" for a route pattern, which opts give
	if !validScopeName(scope) {
		named = ""
	}
	s.build = func(g rules.Group) (http.Handler, error) {
		g.Scope = named
		mw, err := l.wrapper(g, opts...)
		if err != nil {
			return nil, err
		}
		return mw(next), nil
	}
	return s
}

// validScopeName reports whether scope can be a scope: name (a route
// pattern cannot: it holds a space or a slash).
func validScopeName(scope string) bool {
	_, err := rules.Parse("global:1/s; scope:" + scope)
	return err == nil && !strings.ContainsAny(scope, ";")
}
