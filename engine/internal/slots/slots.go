// Package slots keeps the slots of in-flight windows that running
// requests hold, and renews their leases until the requests end.
package slots

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/internal/logevery"
	"github.com/slidelimit/slidelimit/lua"
)

// renewScript extends the leases of running requests; renewSrc is its
// text, read once, from which its SHA1 is computed.
var (
	renewSrc    = lua.Script("renew")
	renewScript = redis.NewScript(renewSrc)
)

// ScriptHash returns the SHA1 of the renewal script.
func ScriptHash() string { return renewScript.Hash() }

// A Ref names one held slot: a slot key and the request's member in it.
type Ref struct{ Key, Member string }

// Client is the part of a go-redis client a Holder uses.
type Client interface {
	Pipeline() redis.Pipeliner
}

// Config is what a Holder needs from its engine.
type Config struct {
	Client   Client
	Log      *slog.Logger
	Lease    int64         // µs
	Timeout  time.Duration // of one renewal
	LogEvery time.Duration // the least time between two lines of failed renewals
	// Group returns the script call that renews key: keys of one group
	// share a server.
	Group func(key string) string
	// Down reports whether the server of key is down: its slots wait.
	Down func(key string) bool
	// Time returns the script's time argument (0 for Redis TIME).
	Time func() (int64, error)
	// Lost is called with every slot a renewal finds gone; may be nil.
	Lost   func(Ref)
	Stop   <-chan struct{} // closed when the engine closes
	Closed func() bool     // whether the engine closed
}

// A Holder is the registry of held slots, which its renewal goroutine
// renews every lease/3. The goroutine starts with the first slot and stops
// with the engine. A Holder is safe for concurrent use.
type Holder struct {
	cfg     Config
	mu      sync.Mutex
	held    map[Ref]struct{}
	started bool
	done    chan struct{} // closed when the renewal goroutine has returned
	warn    logevery.Gate // of failed renewals' lines
}

// New returns a Holder that holds no slot.
func New(cfg Config) *Holder {
	return &Holder{cfg: cfg, warn: logevery.Gate{Every: cfg.LogEvery}}
}

// Hold registers ref, unless the engine is closed.
func (h *Holder) Hold(ref Ref) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cfg.Closed() {
		return
	}
	if h.held == nil {
		h.held = make(map[Ref]struct{})
	}
	h.held[ref] = struct{}{}
	if !h.started {
		h.started = true
		h.done = make(chan struct{})
		go h.renewLoop(h.done)
	}
}

// Release forgets ref.
func (h *Holder) Release(ref Ref) {
	h.mu.Lock()
	delete(h.held, ref)
	h.mu.Unlock()
}

// Clear forgets every slot.
func (h *Holder) Clear() {
	h.mu.Lock()
	clear(h.held)
	h.mu.Unlock()
}

// Done returns a channel closed once the renewal goroutine has returned,
// or nil when it never started.
func (h *Holder) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

// holding reports whether ref is still registered.
func (h *Holder) holding(ref Ref) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.held[ref]
	return ok
}

// renewLoop renews every held slot each lease/3 until the engine closes.
func (h *Holder) renewLoop(done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(time.Duration(h.cfg.Lease) * time.Microsecond / 3)
	defer tick.Stop()
	for {
		select {
		case <-h.cfg.Stop:
			return
		case <-tick.C:
			h.Renew()
		}
	}
}

// Renew extends the lease of every held slot: one script call per group,
// all in one pipeline. Slots found gone are reported (Config.Lost); a call
// that fails is logged and its slots are renewed at the next period, which
// comes well before their leases end.
func (h *Holder) Renew() {
	groups := h.groups()
	if len(groups) == 0 {
		return
	}
	t, err := h.cfg.Time()
	if err != nil {
		h.cfg.Log.Error("engine: slot renewal", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Timeout)
	defer cancel()
	h.renewed(h.send(ctx, groups, t))
}

// groups returns the held slots by script call (group → key → members),
// leaving out those of servers that are down: their probe finds out when
// they answer again, and their slots are renewed at the first period after.
func (h *Holder) groups() map[string]map[string][]string {
	h.mu.Lock()
	groups := make(map[string]map[string][]string)
	for ref := range h.held {
		g := h.cfg.Group(ref.Key)
		if groups[g] == nil {
			groups[g] = make(map[string][]string)
		}
		groups[g][ref.Key] = append(groups[g][ref.Key], ref.Member)
	}
	h.mu.Unlock()
	for g, keys := range groups {
		for key := range keys {
			if h.cfg.Down(key) {
				delete(groups, g)
			}
			break // a group's keys share a server
		}
	}
	return groups
}

// renewal is one renewal script call and the slots it renews, in order.
type renewal struct {
	cmd  *redis.IntSliceCmd
	refs []Ref
}

// send renews groups at time t, one script call per group in one
// pipeline; a server without the script (the first renewal, a restart)
// gets its calls again with the source, in one more pipeline.
func (h *Holder) send(ctx context.Context, groups map[string]map[string][]string, t int64) []renewal {
	calls := make([]renewal, 0, len(groups))
	pipe := h.cfg.Client.Pipeline()
	for _, keys := range groups {
		args := []any{"evalsha", renewScript.Hash(), len(keys)}
		var refs []Ref
		for key := range keys {
			args = append(args, key)
		}
		args = append(args, t, h.cfg.Lease)
		for _, a := range args[3 : 3+len(keys)] {
			key := a.(string)
			ms := keys[key]
			args = append(args, len(ms))
			for _, m := range ms {
				args = append(args, m)
				refs = append(refs, Ref{Key: key, Member: m})
			}
		}
		cmd := redis.NewIntSliceCmd(ctx, args...)
		_ = pipe.Process(ctx, cmd)
		calls = append(calls, renewal{cmd: cmd, refs: refs})
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	var retry redis.Pipeliner
	for i := range calls {
		if err := calls[i].cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if retry == nil {
				retry = h.cfg.Client.Pipeline()
			}
			args := calls[i].cmd.Args()
			args[0], args[1] = "eval", renewSrc
			calls[i].cmd = redis.NewIntSliceCmd(ctx, args...)
			_ = retry.Process(ctx, calls[i].cmd)
		}
	}
	if retry != nil {
		_, _ = retry.Exec(ctx)
	}
	return calls
}

// renewed reads the renewals' replies: slots found gone are forgotten and
// reported (Config.Lost), failures logged at most once per LogEvery.
func (h *Holder) renewed(calls []renewal) {
	var lost []Ref
	failed := 0
	var firstErr error
	for _, s := range calls {
		v, err := s.cmd.Result()
		if err == nil && len(v) != len(s.refs) {
			err = codec.NewReplyError("renewal reply of the wrong length", "")
		}
		if err != nil {
			failed += len(s.refs)
			firstErr = err
			continue
		}
		for i, ok := range v {
			// A slot released while its renewal was on its way is gone
			// for a good reason.
			if ok == 0 && h.holding(s.refs[i]) {
				h.Release(s.refs[i])
				lost = append(lost, s.refs[i])
			}
		}
	}
	if failed > 0 {
		if ok, n := h.warn.Allow(time.Now()); ok {
			h.cfg.Log.Warn("engine: slot renewal failed; retried at the next period", "slots", failed, "err", firstErr, "suppressed", n)
		}
	}
	if len(lost) > 0 {
		h.cfg.Log.Warn("engine: running requests lost their slots (reset, flushed or expired); they keep running", "slots", len(lost))
		if h.cfg.Lost != nil {
			for _, l := range lost {
				h.cfg.Lost(l)
			}
		}
	}
}
