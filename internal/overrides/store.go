// Package overrides keeps the rule overrides of slidelimit.Limiter
// (slidelimit.Limiter.SetRules): rule groups that replace, at run time and
// in every process that shares a Redis and a key prefix, the group the code
// declared for a scope. It does the Redis work; the Limiter builds the
// handlers. The overrides live in Redis under the prefix, in one hash tag
// so that a Redis Cluster keeps them together:
//
//	prefix{rules}         hash: scope → canonical rule text
//	prefix{rules}version  counter, incremented with every change in the
//	                      same script call (lua/set_rules.lua)
//	prefix{rules}         also the pub/sub channel a change's new version
//	                      is published on
//
// Each Store loads them when it starts, applies every change it hears of on
// the channel, and checks the version every interval (and after its
// subscription reconnects) to catch a message it missed.
//
// The Store subscribes on a connection of its own, beside the engine's
// invalidation subscription (engine/cache.go), rather than sharing its
// receive loop: the two are switched independently (engine.WithCachedDenials
// and the root's rules check, which tests set in export_test.go), the engine's loop measures its own
// subscription's health for cached denials, and a change of overrides is
// rare and may wait for a version check, where an invalidation may not.
package overrides

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/reach"
	"github.com/slidelimit/slidelimit/lua"
	"github.com/slidelimit/slidelimit/rules"
)

// Timeout bounds each Redis call about overrides, which are off the
// request path.
const Timeout = time.Second

// ErrScope means an override was given an empty scope, or rule text whose
// scope: statement names another scope. slidelimit wraps it in a
// *slidelimit.ConfigError.
var ErrScope = errors.New("slidelimit: invalid override scope")

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

// Set is one version of the overrides, as applied: immutable.
type Set struct {
	// Version counts the changes made since the overrides were first
	// stored under the prefix; 0 when none was ever made.
	Version int64
	// Texts maps each scope with an override to its canonical text.
	Texts    map[string]string
	groups   map[string]rules.Group // scope → parsed group (its scope: as written)
	rejected map[string]string      // scope → the text in Redis that apply refused
}

// Store is a process's view of the rule overrides in Redis. Its methods
// are safe for concurrent use.
type Store struct {
	client  engine.Client
	hash    string // the hash and the channel
	version string
	log     *slog.Logger
	every   time.Duration

	// syncMu serializes loads with their application, so that a load
	// applies after every load that read Redis before it.
	syncMu   sync.Mutex
	mu       sync.Mutex // serializes applying a Set and adding Switches
	switches map[string][]Follower
	cur      atomic.Pointer[Set]

	down      atomic.Bool // the last Redis call failed; logged once
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// New returns the Store of the overrides under prefix in client's Redis,
// checking their version every interval and logging to log. Start it.
func New(client engine.Client, prefix string, every time.Duration, log *slog.Logger) *Store {
	o := &Store{
		client: client, hash: prefix + "{rules}", version: prefix + "{rules}version", log: log, every: every,
		switches: map[string][]Follower{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	o.cur.Store(&Set{})
	return o
}

// Start loads the overrides and starts the goroutine that follows them.
// A Redis that does not answer leaves the code's rules in force; the
// goroutine keeps trying.
func (o *Store) Start() {
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
func (o *Store) follow(ps *redis.PubSub) {
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
func (o *Store) receive(ps *redis.PubSub, events chan<- bool) {
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
			if v, err := strconv.ParseInt(m.Payload, 10, 64); err == nil && v == o.cur.Load().Version {
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
func (o *Store) sync(check bool) {
	o.syncMu.Lock()
	defer o.syncMu.Unlock()
	if o.down.Load() && reach.Dial(o.client, Timeout) != nil {
		return // still down: the client's pool is not asked (see package reach)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if check {
		v, err := redisInt(o.client, ctx, "get", o.version)
		if o.failed(err) || v == o.cur.Load().Version {
			return
		}
	}
	res, err := eval(ctx, o.client, lua.Script("load_rules"), o.hash, o.version).Slice()
	if o.failed(err) {
		return
	}
	set, err := parseSet(res)
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
func (o *Store) failed(err error) bool {
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

// parseSet reads the reply of load_rules.lua. Texts that are not valid
// rule groups (a newer library's syntax) are refused with a log line by
// apply.
func parseSet(res []any) (*Set, error) {
	if len(res) != 2 {
		return nil, fmt.Errorf("slidelimit: rule overrides: unexpected reply %v", res)
	}
	vs, _ := res[0].(string)
	v, err := strconv.ParseInt(vs, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("slidelimit: rule overrides: version %q: %w", vs, err)
	}
	kv, _ := res[1].([]any)
	set := &Set{Version: v, Texts: make(map[string]string, len(kv)/2), groups: make(map[string]rules.Group, len(kv)/2)}
	for i := 0; i+1 < len(kv); i += 2 {
		scope, _ := kv[i].(string)
		text, _ := kv[i+1].(string)
		set.Texts[scope] = text
	}
	return set, nil
}

// apply makes set the overrides in force: every Switch of a scope whose
// text changed gets the new group, or the code's when the override is
// gone. Each change is logged once.
func (o *Store) apply(set *Set) {
	o.mu.Lock()
	defer o.mu.Unlock()
	// A version below the last one applied means the store was reset (a
	// FLUSHALL, a restart without persistence): what it holds now rules.
	old := o.cur.Load()
	scopes := slices.Sorted(maps.Keys(set.Texts))
	for s := range old.Texts {
		if _, ok := set.Texts[s]; !ok {
			scopes = append(scopes, s)
		}
	}
	for _, scope := range scopes {
		text, ok := set.Texts[scope]
		if ok {
			g, err := Group(scope, text)
			if err != nil {
				o.reject(old, set, scope, text, err)
				continue
			}
			set.groups[scope] = g
		}
		if oldText, had := old.Texts[scope]; had == ok && oldText == text {
			continue
		}
		if !ok {
			for _, s := range o.switches[scope] {
				s.reset()
			}
			o.log.Info("slidelimit: rule override cleared; the code's rules apply", "scope", scope, "version", set.Version)
			continue
		}
		o.install(scope, set.groups[scope], text, set.Version)
	}
	o.cur.Store(set)
}

// reject keeps, for scope, the rules this process enforced before set: an
// override text that is not a valid rule group (written by a newer
// library, or by hand into Redis) must never replace them, since the
// handlers could then only fail. It logs the rejection once per text, not
// at every later change of other scopes.
func (o *Store) reject(old, set *Set, scope, text string, err error) {
	if old.rejected[scope] != text {
		o.log.Error("slidelimit: rule override not applied: the rules are not valid; the rules in force stay", "scope", scope, "rules", text, "version", set.Version, "error", err)
	}
	if set.rejected == nil {
		set.rejected = map[string]string{}
	}
	set.rejected[scope] = text
	if oldText, had := old.Texts[scope]; had {
		set.Texts[scope], set.groups[scope] = oldText, old.groups[scope]
	} else {
		delete(set.Texts, scope)
	}
}

// install gives every Switch of scope the middleware for g, logging the
// change once.
func (o *Store) install(scope string, g rules.Group, text string, version int64) {
	var errs []error
	for _, s := range o.switches[scope] {
		if err := s.apply(g); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		o.log.Error("slidelimit: rule override not applied to some handlers of the scope", "scope", scope, "rules", text, "version", version, "error", errors.Join(errs...))
		return
	}
	o.log.Info("slidelimit: rule override applied", "scope", scope, "rules", text, "version", version, "handlers", len(o.switches[scope]))
}

// Add registers s, applying the override of its scope if one is in force.
func (o *Store) Add(s Follower) {
	o.mu.Lock()
	defer o.mu.Unlock()
	scope := s.Scope()
	o.switches[scope] = append(o.switches[scope], s)
	if g, ok := o.cur.Load().groups[scope]; ok {
		if err := s.apply(g); err != nil {
			o.log.Error("slidelimit: rule override not applied to a new handler", "scope", scope, "error", err)
		}
	}
}

// Close stops following the overrides; the ones in force stay.
func (o *Store) Close() {
	o.closeOnce.Do(func() {
		close(o.stop)
		<-o.done
	})
}

// Load reads the overrides stored in Redis now (not as this process last
// applied them).
func (o *Store) Load(ctx context.Context) (*Set, error) {
	res, err := eval(ctx, o.client, lua.Script("load_rules"), o.hash, o.version).Slice()
	if err != nil {
		return nil, fmt.Errorf("slidelimit: rule overrides: %w", err)
	}
	return parseSet(res)
}

// Switches returns the Switches of scope.
func (o *Store) Switches(scope string) []Follower {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.switches[scope])
}

// InForce returns the group of the override of scope this process applies,
// if any.
func (o *Store) InForce(scope string) (rules.Group, bool) {
	g, ok := o.cur.Load().groups[scope]
	return g, ok
}

// InForceAll returns the group of every override this process applies, by
// scope. The map is the Store's own: read it, never change it.
func (o *Store) InForceAll() map[string]rules.Group { return o.cur.Load().groups }

// Scopes returns the scopes of set, sorted.
func (set *Set) Scopes() []string { return slices.Sorted(maps.Keys(set.Texts)) }

// Group parses the rule text of an override of scope, as a limit
// tag is parsed: a scope: statement may only repeat scope. A Switch gives
// the group the scope: name of its code's group (see follow), so that its
// windows stay those of the scope.
func Group(scope, text string) (rules.Group, error) {
	if scope == "" {
		return rules.Group{}, fmt.Errorf("%w: empty scope", ErrScope)
	}
	g, err := rules.Parse(text)
	if err != nil {
		return rules.Group{}, err
	}
	if g.Scope != "" && g.Scope != scope {
		return rules.Group{}, fmt.Errorf("%w: the rules say scope:%s, the override is for %q", ErrScope, g.Scope, scope)
	}
	return g, nil
}

// Write stores text as the override of scope ("" removes it), then loads
// and applies the overrides here, so that the change is in force in this
// process when SetRules returns.
func (o *Store) Write(ctx context.Context, scope, text string) error {
	if _, err := eval(ctx, o.client, lua.Script("set_rules"), o.hash, o.version, scope, text).Int64(); err != nil {
		return fmt.Errorf("slidelimit: rule overrides: %w", err)
	}
	o.sync(false)
	return nil
}
