package engine

import (
	"errors"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/eviction"
)

// EvictionEvent reports that a Redis server the engine uses evicted keys.
// The windows stored there may have lost entries, and then admitted more
// than their limits. Redis counts every evicted key, the engine's and
// others'.
type EvictionEvent struct {
	// Server is the server's address.
	Server string
	// Policy is its maxmemory-policy.
	Policy string
	// Evicted is the number of keys it evicted since the previous check.
	Evicted int64
	// Total is its evicted_keys counter (since its start or CONFIG
	// RESETSTAT).
	Total int64
}

// WithRequireNoEviction makes New refuse a Redis server that can evict the
// engine's keys: one with maxmemory set and a maxmemory-policy other than
// noeviction. New checks every server the engine uses (every master of a
// cluster). It also fails, with an error matching ErrBackend, when a
// server's INFO cannot be read. By default New only logs a warning.
func WithRequireNoEviction() Option {
	return func(c *config) error {
		c.requireNoEviction = true
		return nil
	}
}

// WithEvictionHook sets a function called with every EvictionEvent, from
// the engine's own goroutine. An event comes when a check, at New and then
// every minute, finds that a server's evicted_keys grew. The default is no
// hook. Evictions are logged either way, at most one line per server and
// check.
func WithEvictionHook(hook func(EvictionEvent)) Option {
	return func(c *config) error {
		if hook == nil {
			return &optionError{Option: "WithEvictionHook", Reason: "nil hook"}
		}
		c.evictionHook = hook
		return nil
	}
}

// withEvictionCheck sets how often the guard checks; 0 turns it off (for
// tests whose hooks must see only the calls' commands).
func withEvictionCheck(d time.Duration) Option {
	return func(c *config) error {
		c.evictionEvery, c.evictionEverySet = d, true
		return nil
	}
}

// startGuard makes the first check of the servers' memory policy and
// starts the periodic ones.
func (e *Engine) startGuard(cfg *config) error {
	every := eviction.DefaultEvery
	if cfg.evictionEverySet {
		every = cfg.evictionEvery
	}
	if every <= 0 {
		return nil
	}
	gc := eviction.Config{Client: e.client, Addr: e.doms.One.Addr, Log: e.log, Answered: answered}
	if hook := cfg.evictionHook; hook != nil {
		gc.Hook = func(ev eviction.Event) { hook(EvictionEvent(ev)) }
	}
	g := eviction.New(gc)
	if err := g.First(min(e.timeout, time.Second), cfg.requireNoEviction); err != nil {
		if errors.Is(err, eviction.ErrMayEvict) {
			return err
		}
		return &backendError{Op: "info", Err: err}
	}
	e.bg.Start(func() { g.Run(every, e.timeout, e.stop) })
	return nil
}
