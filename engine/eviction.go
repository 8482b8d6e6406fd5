package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultEvictionCheck is how often the engine reads the memory settings
// and eviction counter of every Redis server it uses.
const defaultEvictionCheck = time.Minute

// errEviction is matched by the error of New with WithRequireNoEviction
// when a server may evict the engine's keys (tests match it).
var errEviction = errors.New("engine: redis may evict rate-limit keys")

// evictionError reports, from New with WithRequireNoEviction, a Redis
// server whose memory policy can evict the engine's keys. It matches
// errEviction.
type evictionError struct {
	// Server is the server's address.
	Server string
	// Policy is its maxmemory-policy.
	Policy string
	// MaxMemory is its maxmemory, in bytes.
	MaxMemory int64
}

func (e *evictionError) Error() string {
	return "engine: redis " + e.Server + " may evict rate-limit keys (maxmemory " +
		strconv.FormatInt(e.MaxMemory, 10) + ", maxmemory-policy " + e.Policy +
		"); set maxmemory-policy noeviction or use a dedicated instance without maxmemory"
}

// Is reports whether target is errEviction.
func (e *evictionError) Is(target error) bool { return target == errEviction }

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

// serverMemory is what the guard reads from one server's INFO.
type serverMemory struct {
	addr      string
	maxMemory int64
	policy    string
	evicted   int64
}

// canEvict reports whether the server can evict the engine's keys.
func (m *serverMemory) canEvict() bool {
	return m.maxMemory > 0 && m.policy != "noeviction"
}

// evictionGuard is the state of the periodic checks, used by one
// goroutine at a time (New, then the guard's goroutine).
type evictionGuard struct {
	every   time.Duration
	hook    func(EvictionEvent)
	servers map[string]*guardServer
	failed  bool // the last check could not read a server
}

type guardServer struct {
	warned  bool  // the policy warning was logged
	evicted int64 // evicted_keys at the last check
}

// startGuard makes the first check and starts the periodic ones.
func (e *Engine) startGuard(cfg *config) error {
	every := defaultEvictionCheck
	if cfg.evictionEverySet {
		every = cfg.evictionEvery
	}
	if every <= 0 {
		return nil
	}
	g := &evictionGuard{every: every, hook: cfg.evictionHook, servers: map[string]*guardServer{}}
	ctx, cancel := context.WithTimeout(context.Background(), min(e.timeout, time.Second))
	ms, err := e.memoryInfo(ctx)
	cancel()
	if cfg.requireNoEviction {
		if err != nil {
			return &backendError{Op: "info", Err: err}
		}
		for i := range ms {
			if ms[i].canEvict() {
				return &evictionError{Server: ms[i].addr, Policy: ms[i].policy, MaxMemory: ms[i].maxMemory}
			}
		}
	}
	e.guard(g, ms, err)
	e.bg.start(func() {
		t := time.NewTicker(g.every)
		defer t.Stop()
		for {
			select {
			case <-e.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
			ms, err := e.memoryInfo(ctx)
			cancel()
			e.guard(g, ms, err)
		}
	})
	return nil
}

// guard logs what one check found and reports evictions.
func (e *Engine) guard(g *evictionGuard, ms []serverMemory, err error) {
	switch {
	case err != nil && !g.failed && !answered(err):
		e.log.Warn("engine: redis is down (it does not answer); eviction of rate-limit keys is checked again once it answers", "err", err)
	case err != nil && !g.failed:
		e.log.Warn("engine: cannot read INFO memory of redis (INFO disabled, or not Redis); eviction of rate-limit keys is not watched until it can", "err", err)
	}
	g.failed = err != nil
	for i := range ms {
		m := &ms[i]
		s := g.servers[m.addr]
		if s == nil {
			// Evictions before the engine started are not its concern.
			s = &guardServer{evicted: m.evicted}
			g.servers[m.addr] = s
		}
		switch {
		case m.canEvict() && !s.warned:
			s.warned = true
			e.log.Warn("engine: redis may evict rate-limit keys, silently forgetting requests counted in their windows; "+
				"set maxmemory-policy noeviction or use a dedicated instance without maxmemory",
				"server", m.addr, "maxmemory_policy", m.policy, "maxmemory", m.maxMemory)
		case !m.canEvict():
			s.warned = false
		}
		if m.evicted < s.evicted { // a restart or CONFIG RESETSTAT
			s.evicted = 0
		}
		if n := m.evicted - s.evicted; n > 0 {
			s.evicted = m.evicted
			e.log.Warn("engine: redis evicted keys; rate-limit windows may have lost entries and admitted more than their limits",
				"server", m.addr, "evicted", n, "maxmemory_policy", m.policy)
			if g.hook != nil {
				g.hook(EvictionEvent{Server: m.addr, Policy: m.policy, Evicted: n, Total: m.evicted})
			}
		}
	}
}

// memoryInfo reads INFO memory and INFO stats of every server the engine uses:
// every master of a cluster, every shard of a Ring, the one server
// otherwise. It returns what it could read and the first error.
func (e *Engine) memoryInfo(ctx context.Context) ([]serverMemory, error) {
	var mu sync.Mutex
	var ms []serverMemory
	read := func(ctx context.Context, c Client, addr string) error {
		// Two commands: INFO takes one section before Redis 7.
		mem, stats := redis.NewStringCmd(ctx, "info", "memory"), redis.NewStringCmd(ctx, "info", "stats")
		for _, cmd := range []*redis.StringCmd{mem, stats} {
			if err := c.Process(ctx, cmd); err != nil && !noMemorySection(cmd, err) {
				return fmt.Errorf("%s: %w", addr, err)
			}
		}
		m := parseMemory(mem.Val() + stats.Val())
		m.addr = addr
		mu.Lock()
		ms = append(ms, m)
		mu.Unlock()
		return nil
	}
	each := func(ctx context.Context, c *redis.Client) error { return read(ctx, c, c.Options().Addr) }
	var err error
	switch c := e.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, each)
	case *redis.Ring:
		err = c.ForEachShard(ctx, each)
	default:
		err = read(ctx, e.client, e.doms.one.addr)
	}
	return ms, err
}

// parseMemory reads the fields the guard needs from an INFO reply.
func parseMemory(info string) serverMemory {
	var m serverMemory
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "maxmemory":
			m.maxMemory, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory_policy":
			m.policy = v
		case "evicted_keys":
			m.evicted, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return m
}

// noMemorySection reports whether err is the reply of a server that keeps
// no memory limit and so cannot evict: the embedded miniredis answers INFO
// memory with "section (memory) is not supported". Such a server reads as
// one without maxmemory, which no check warns about.
func noMemorySection(cmd *redis.StringCmd, err error) bool {
	var re redis.Error
	return len(cmd.Args()) == 2 && cmd.Args()[1] == "memory" &&
		errors.As(err, &re) && strings.Contains(re.Error(), "section (memory) is not supported")
}
