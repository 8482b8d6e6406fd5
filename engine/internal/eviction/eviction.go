// Package eviction watches the Redis servers an engine uses for a memory
// policy that can evict its keys, and for keys they evicted.
package eviction

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultEvery is how often a Guard reads the memory settings and eviction
// counter of every Redis server it watches.
const DefaultEvery = time.Minute

// ErrMayEvict is matched by an *Error.
var ErrMayEvict = errors.New("engine: redis may evict rate-limit keys")

// Error reports a Redis server whose memory policy can evict the engine's
// keys. It matches ErrMayEvict.
type Error struct {
	// Server is the server's address.
	Server string
	// Policy is its maxmemory-policy.
	Policy string
	// MaxMemory is its maxmemory, in bytes.
	MaxMemory int64
}

func (e *Error) Error() string {
	return "engine: redis " + e.Server + " may evict rate-limit keys (maxmemory " +
		strconv.FormatInt(e.MaxMemory, 10) + ", maxmemory-policy " + e.Policy +
		"); set maxmemory-policy noeviction or use a dedicated instance without maxmemory"
}

// Is reports whether target is ErrMayEvict.
func (e *Error) Is(target error) bool { return target == ErrMayEvict }

// Event reports that a server evicted keys since the previous check.
type Event struct {
	Server  string // the server's address
	Policy  string // its maxmemory-policy
	Evicted int64  // keys evicted since the previous check
	Total   int64  // its evicted_keys counter
}

// Client is the part of a go-redis client a Guard uses. A cluster's or a
// Ring's servers are each read; any other client is one server.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Config is what a Guard needs from its engine.
type Config struct {
	Client Client
	Addr   string // the address logged for a client of one server
	Log    *slog.Logger
	Hook   func(Event) // called with every eviction; may be nil
	// Answered reports whether a call that failed with err reached a
	// server that answered.
	Answered func(err error) bool
}

// A Guard holds what the checks found. One goroutine at a time uses it.
type Guard struct {
	cfg     Config
	servers map[string]*server
	failed  bool // the last check could not read a server
}

type server struct {
	warned  bool  // the policy warning was logged
	evicted int64 // evicted_keys at the last check
}

// New returns a Guard that has checked nothing yet.
func New(cfg Config) *Guard {
	return &Guard{cfg: cfg, servers: map[string]*server{}}
}

// First makes the first check, waiting at most timeout. With require set,
// it returns an *Error for a server that can evict, or the error of a
// server it could not read; otherwise it only logs them.
func (g *Guard) First(timeout time.Duration, require bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	ms, err := g.memoryInfo(ctx)
	cancel()
	if require {
		if err != nil {
			return err
		}
		for i := range ms {
			if ms[i].canEvict() {
				return &Error{Server: ms[i].addr, Policy: ms[i].policy, MaxMemory: ms[i].maxMemory}
			}
		}
	}
	g.note(ms, err)
	return nil
}

// Run checks every period, each check waiting at most timeout, until stop
// is closed.
func (g *Guard) Run(every, timeout time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		ms, err := g.memoryInfo(ctx)
		cancel()
		g.note(ms, err)
	}
}

// serverMemory is what a check reads from one server's INFO.
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

// note logs what one check found and reports evictions.
func (g *Guard) note(ms []serverMemory, err error) {
	log := g.cfg.Log
	switch {
	case err != nil && !g.failed && !g.cfg.Answered(err):
		log.Warn("engine: redis is down (it does not answer); eviction of rate-limit keys is checked again once it answers", "err", err)
	case err != nil && !g.failed:
		log.Warn("engine: cannot read INFO memory of redis (INFO disabled, or not Redis); eviction of rate-limit keys is not watched until it can", "err", err)
	}
	g.failed = err != nil
	for i := range ms {
		m := &ms[i]
		s := g.servers[m.addr]
		if s == nil {
			// Evictions before the engine started are not its concern.
			s = &server{evicted: m.evicted}
			g.servers[m.addr] = s
		}
		switch {
		case m.canEvict() && !s.warned:
			s.warned = true
			log.Warn("engine: redis may evict rate-limit keys, silently forgetting requests counted in their windows; "+
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
			log.Warn("engine: redis evicted keys; rate-limit windows may have lost entries and admitted more than their limits",
				"server", m.addr, "evicted", n, "maxmemory_policy", m.policy)
			if g.cfg.Hook != nil {
				g.cfg.Hook(Event{Server: m.addr, Policy: m.policy, Evicted: n, Total: m.evicted})
			}
		}
	}
}

// memoryInfo reads INFO memory and INFO stats of every server: every
// master of a cluster, every shard of a Ring, the one server otherwise. It
// returns what it could read and the first error.
func (g *Guard) memoryInfo(ctx context.Context) ([]serverMemory, error) {
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
	switch c := g.cfg.Client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, each)
	case *redis.Ring:
		err = c.ForEachShard(ctx, each)
	default:
		err = read(ctx, g.cfg.Client, g.cfg.Addr)
	}
	return ms, err
}

// parseMemory reads the fields a check needs from an INFO reply.
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
