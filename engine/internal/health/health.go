// Package health tells which Redis servers answer. A server that did not
// answer is down: calls that need it decide by their fail mode without
// asking it, while a background probe asks it again until it answers.
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/logevery"
	"github.com/slidelimit/slidelimit/internal/reach"
)

// Timing of the down state.
const (
	// ProbeEvery is the first pause between two probes of a server that is
	// down; each failed probe doubles it, up to ProbeMaxEvery. It is short
	// so that a lone timeout (a loaded machine, a pause of the server)
	// sends little traffic to the fail mode; a server that stays down is
	// asked once a second from the second second on.
	ProbeEvery    = 50 * time.Millisecond
	ProbeMaxEvery = time.Second
)

// A Domain is one failure domain: the server a key lives on (the one
// server of a *redis.Client, a cluster master, a Ring shard). Calls whose
// keys all live on other servers are not affected by its being down.
type Domain struct {
	Addr    string
	Down    atomic.Bool  // it did not answer, and no probe got an answer since
	Probing atomic.Bool  // a probe goroutine runs for it
	failed  atomic.Int64 // fail-mode decisions that needed it since the last log line
	since   atomic.Int64 // when it went down, Unix ns

	warn   logevery.Gate // of its outage lines
	oom    logevery.Gate // of its out-of-memory lines
	warned atomic.Bool   // the current outage's line was written: log its end
}

// NoteFailed counts a fail-mode decision that needed d, when d is down,
// for the outage's next log line.
func (d *Domain) NoteFailed() {
	if d.Down.Load() {
		d.failed.Add(1)
	}
}

// SetLogEvery sets the least time between two outage lines of d.
func (d *Domain) SetLogEvery(every time.Duration) { d.warn.Every = every }

// Client is the part of a go-redis client a Monitor uses.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Config is what a Monitor needs from its engine.
type Config struct {
	Client   Client
	Addr     string        // of a single-server client, for log lines
	Log      *slog.Logger  // of outages
	Timeout  time.Duration // of a probe
	LogEvery time.Duration // the least time between two outage lines of a server
	// Answered reports whether a call that failed with err reached a
	// server that answered.
	Answered func(err error) bool
	Stop     <-chan struct{} // closed when the engine closes
	Closed   func() bool     // whether the engine closed
	Run      *Background     // runs the probes
}

// A Monitor holds the domains of one engine. One is the domain of every
// key when the servers cannot be told apart (a *redis.Client, an unknown
// Client, a cluster whose slot map cannot be read).
type Monitor struct {
	One *Domain
	cfg Config
	mu  sync.RWMutex
	m   map[string]*Domain
}

// New returns a Monitor in which every server is up.
func New(cfg Config) *Monitor {
	m := &Monitor{cfg: cfg, m: map[string]*Domain{}}
	m.One = m.newDomain(cfg.Addr)
	return m
}

func (m *Monitor) newDomain(addr string) *Domain {
	if addr == "" {
		addr = "redis"
	}
	every := m.cfg.LogEvery
	return &Domain{Addr: addr, warn: logevery.Gate{Every: every}, oom: logevery.Gate{Every: every}}
}

func (m *Monitor) get(addr string) *Domain {
	m.mu.RLock()
	d := m.m[addr]
	m.mu.RUnlock()
	if d != nil {
		return d
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if d = m.m[addr]; d == nil {
		d = m.newDomain(addr)
		m.m[addr] = d
	}
	return d
}

// Of returns the domain of key: the master of its slot on a Redis
// Cluster, its shard on a Ring, One otherwise.
func (m *Monitor) Of(key string) *Domain {
	var node *redis.Client
	var err error
	switch c := m.cfg.Client.(type) {
	case *redis.ClusterClient:
		node, err = c.MasterForKey(context.Background(), key)
	case *redis.Ring:
		node, err = c.GetShardClientForKey(key)
	default:
		return m.One
	}
	if err != nil {
		return m.One
	}
	return m.get(node.Options().Addr)
}

// AnyDown reports whether a domain is down.
func (m *Monitor) AnyDown() bool {
	down := m.One.Down.Load()
	m.mu.RLock()
	for _, d := range m.m {
		down = down || d.Down.Load()
	}
	m.mu.RUnlock()
	return down
}

// MarkDown records that d did not answer: from now on the calls that need
// it decide by their fail mode without asking it, and a background probe
// asks it again until it answers.
func (m *Monitor) MarkDown(d *Domain, err error) {
	if !d.Down.Swap(true) {
		now := time.Now()
		d.since.Store(now.UnixNano())
		if ok, _ := d.warn.Allow(now); ok {
			d.warned.Store(true)
			m.cfg.Log.Warn("engine: redis does not answer; deciding by fail mode without asking it until a background probe gets an answer",
				"server", d.Addr, "err", err, "fail_mode_decisions", d.failed.Swap(0))
		} else {
			// A server that flaps: the counts go into the next line.
			d.warned.Store(false)
		}
	}
	m.startProbe(d)
}

// MarkUp records that d answered again.
func (m *Monitor) MarkUp(d *Domain) {
	if !d.Down.Swap(false) {
		return
	}
	if d.warned.Swap(false) {
		m.cfg.Log.Info("engine: redis answers again; deciding in redis",
			"server", d.Addr, "down_for", time.Since(time.Unix(0, d.since.Load())).Round(time.Millisecond),
			"fail_mode_decisions", d.failed.Swap(0))
	}
}

// startProbe starts d's probe unless it runs already.
func (m *Monitor) startProbe(d *Domain) {
	if m.cfg.Closed() || !d.Probing.CompareAndSwap(false, true) {
		return
	}
	if !m.cfg.Run.Start(func() { m.probe(d) }) {
		d.Probing.Store(false)
	}
}

// probe asks d at once, then after ProbeEvery, doubling the pause up to
// ProbeMaxEvery, until it answers or the engine is closed. Every LogEvery
// of the outage it logs one line with the number of fail-mode decisions
// since the last.
func (m *Monitor) probe(d *Domain) {
	for {
		m.probeUntilUp(d)
		d.Probing.Store(false)
		// A call may have marked d down again between the probe's end and
		// the flag's reset, finding the probe still running: go on then.
		if m.cfg.Closed() || !d.Down.Load() || !d.Probing.CompareAndSwap(false, true) {
			return
		}
	}
}

func (m *Monitor) probeUntilUp(d *Domain) {
	defer func() {
		// A panicking client or hook must not crash the process from a
		// goroutine the caller did not start: calls ask the server again
		// (and see the panic themselves).
		if p := recover(); p != nil {
			m.cfg.Log.Error("engine: probe of a down redis server panicked; calls ask it again", "server", d.Addr, "panic", fmt.Sprint(p))
			m.MarkUp(d)
		}
	}()
	wait := time.Duration(0)
	for m.pause(wait) && d.Down.Load() {
		node, err := m.nodeOf(d)
		if node == nil && err == nil {
			// No longer a master of the cluster (a failover): its keys
			// live on another server now, found by the calls' routing.
			m.MarkUp(d)
			return
		}
		if err == nil {
			if err = probePing(node, m.cfg.Timeout); err == nil || m.cfg.Answered(err) {
				m.MarkUp(d)
				return
			}
		}
		if cc, ok := m.cfg.Client.(*redis.ClusterClient); ok {
			cc.ReloadState(context.Background())
		}
		now := time.Now()
		if ok, _ := d.warn.Allow(now); ok {
			d.warned.Store(true)
			m.cfg.Log.Warn("engine: redis still does not answer; deciding by fail mode",
				"server", d.Addr, "down_for", now.Sub(time.Unix(0, d.since.Load())).Round(time.Millisecond),
				"fail_mode_decisions", d.failed.Swap(0), "err", err)
		}
		wait = min(max(2*wait, ProbeEvery), ProbeMaxEvery)
	}
}

// pause waits for d, and reports false if the engine was closed meanwhile.
func (m *Monitor) pause(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-m.cfg.Stop:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-m.cfg.Stop:
		return false
	}
}

// Ping sends PING to c, waiting at most timeout.
func Ping(c Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Process(ctx, redis.NewStatusCmd(ctx, "ping"))
}

// probePing sends PING to c's server, waiting at most timeout, once the
// server accepts connections (reach.Dial): probes through go-redis's pool
// alone made it stop dialing after PoolSize failed probes, and then dial
// once a second only, so the engine came back late after a long outage
// (docs/performance.md, Outages, has the times).
func probePing(c Client, timeout time.Duration) error {
	if err := reach.Dial(c, timeout); err != nil {
		return err
	}
	return Ping(c, timeout)
}

// nodeOf returns the client of d's server: the engine's client for One,
// the current master (or shard) of that address otherwise, or nil and no
// error when no master has that address any more.
func (m *Monitor) nodeOf(d *Domain) (Client, error) {
	if d == m.One {
		return m.cfg.Client, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.Timeout)
	defer cancel()
	var mu sync.Mutex
	var found Client
	match := func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == d.Addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch c := m.cfg.Client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, match)
	case *redis.Ring:
		err = c.ForEachShard(ctx, match)
	default:
		return m.cfg.Client, nil
	}
	if found != nil {
		return found, nil
	}
	if err == nil {
		return nil, nil
	}
	return nil, errors.Join(errTopology, err)
}

var errTopology = errors.New("engine: cannot read the cluster's masters")

// OutOfMemory reports whether err is Redis's OOM error reply: maxmemory is
// reached and the policy is noeviction, so the script cannot write.
func OutOfMemory(err error) bool { return redis.HasErrorPrefix(err, "OOM") }

// LogOOM logs, at most once per LogEvery per server, that d is out of
// memory, with the number of such failures not logged since the last line.
func (m *Monitor) LogOOM(d *Domain, err error) {
	if ok, held := d.oom.Allow(time.Now()); ok {
		m.cfg.Log.Warn("engine: redis is out of memory (maxmemory reached with maxmemory-policy noeviction), "+
			"so the script cannot count requests; decisions follow the fail mode until memory is freed",
			"server", d.Addr, "failures_not_logged", held, "err", err)
	}
}

// Background runs an engine's goroutines (probes of down servers, the
// eviction guard) until Stop. The zero value is ready to use.
type Background struct {
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

// Start runs f in a new goroutine, and reports false after Stop.
func (b *Background) Start(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// Stop waits for the goroutines, which must return once the engine's stop
// channel is closed.
func (b *Background) Stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	b.wg.Wait()
}
