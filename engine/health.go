package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/reach"
)

// Timing of the down state (see domain).
const (
	// probeEvery is the first pause between two probes of a server that is
	// down; each failed probe doubles it, up to probeMaxEvery. It is short
	// so that a lone timeout (a loaded machine, a pause of the server)
	// sends little traffic to the fail mode; a server that stays down is
	// asked once a second from the second second on.
	probeEvery    = 50 * time.Millisecond
	probeMaxEvery = time.Second
	// warnEvery is the least time between two outage lines of one server.
	warnEvery = 10 * time.Second
)

// background runs the engine's goroutines (probes of down servers, the
// eviction guard) and stops them on Close.
type background struct {
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

// start runs f in a new goroutine, unless the engine is closed.
func (b *background) start(f func()) bool {
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

// stop waits for the goroutines, which return once e.stop is closed.
func (b *background) stop() {
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
	b.wg.Wait()
}

// pause waits for d, and reports false if the engine was closed meanwhile.
func (e *Engine) pause(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-e.stop:
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
	case <-e.stop:
		return false
	}
}

// markDown records that d did not answer: from now on the calls that need
// it decide by their fail mode without asking it, and a background probe
// asks it again until it answers.
func (e *Engine) markDown(d *domain, err error) {
	if !d.down.Swap(true) {
		now := time.Now()
		d.since.Store(now.UnixNano())
		if ok, _ := d.warn.Allow(now); ok {
			d.warned.Store(true)
			e.log.Warn("engine: redis does not answer; deciding by fail mode without asking it until a background probe gets an answer",
				"server", d.addr, "err", err, "fail_mode_decisions", d.failed.Swap(0))
		} else {
			// A server that flaps: the counts go into the next line.
			d.warned.Store(false)
		}
	}
	e.startProbe(d)
}

// markUp records that d answered again.
func (e *Engine) markUp(d *domain) {
	if !d.down.Swap(false) {
		return
	}
	if d.warned.Swap(false) {
		e.log.Info("engine: redis answers again; deciding in redis",
			"server", d.addr, "down_for", time.Since(time.Unix(0, d.since.Load())).Round(time.Millisecond),
			"fail_mode_decisions", d.failed.Swap(0))
	}
}

// startProbe starts d's probe unless it runs already.
func (e *Engine) startProbe(d *domain) {
	if e.closed.Load() || !d.probing.CompareAndSwap(false, true) {
		return
	}
	if !e.bg.start(func() { e.probe(d) }) {
		d.probing.Store(false)
	}
}

// probe asks d at once, then after probeEvery, doubling the pause up to
// probeMaxEvery, until it answers or the engine is closed. Every warnEvery
// of the outage it logs one line with the number of fail-mode decisions
// since the last.
func (e *Engine) probe(d *domain) {
	for {
		e.probeUntilUp(d)
		d.probing.Store(false)
		// A call may have marked d down again between the probe's end and
		// the flag's reset, finding the probe still running: go on then.
		if e.closed.Load() || !d.down.Load() || !d.probing.CompareAndSwap(false, true) {
			return
		}
	}
}

func (e *Engine) probeUntilUp(d *domain) {
	defer func() {
		// A panicking client or hook must not crash the process from a
		// goroutine the caller did not start: calls ask the server again
		// (and see the panic themselves).
		if p := recover(); p != nil {
			e.log.Error("engine: probe of a down redis server panicked; calls ask it again", "server", d.addr, "panic", fmt.Sprint(p))
			e.markUp(d)
		}
	}()
	wait := time.Duration(0)
	for e.pause(wait) && d.down.Load() {
		node, err := e.nodeOf(d)
		if node == nil && err == nil {
			// No longer a master of the cluster (a failover): its keys
			// live on another server now, found by the calls' routing.
			e.markUp(d)
			return
		}
		if err == nil {
			if err = probePing(node, e.timeout); answered(err) {
				e.markUp(d)
				return
			}
		}
		if cc, ok := e.client.(*redis.ClusterClient); ok {
			cc.ReloadState(context.Background())
		}
		now := time.Now()
		if ok, _ := d.warn.Allow(now); ok {
			d.warned.Store(true)
			e.log.Warn("engine: redis still does not answer; deciding by fail mode",
				"server", d.addr, "down_for", now.Sub(time.Unix(0, d.since.Load())).Round(time.Millisecond),
				"fail_mode_decisions", d.failed.Swap(0), "err", err)
		}
		wait = min(max(2*wait, probeEvery), probeMaxEvery)
	}
}

// ping sends PING to c, waiting at most timeout.
func ping(c Client, timeout time.Duration) error {
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
	return ping(c, timeout)
}

// nodeOf returns the client of d's server: the engine's client for its
// one domain, the current master (or shard) of that address otherwise, or
// nil and no error when no master has that address any more.
func (e *Engine) nodeOf(d *domain) (Client, error) {
	if d == e.doms.one {
		return e.client, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	var mu sync.Mutex
	var found Client
	match := func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == d.addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch c := e.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, match)
	case *redis.Ring:
		err = c.ForEachShard(ctx, match)
	default:
		return e.client, nil
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

// outOfMemory reports whether err is Redis's OOM error reply: maxmemory is
// reached and the policy is noeviction, so the script cannot write.
func outOfMemory(err error) bool { return redis.HasErrorPrefix(err, "OOM") }

// logOOM logs, at most once per warnEvery per server, that d is out of
// memory, with the number of such failures not logged since the last line.
func (e *Engine) logOOM(d *domain, err error) {
	if ok, held := d.oom.Allow(time.Now()); ok {
		e.log.Warn("engine: redis is out of memory (maxmemory reached with maxmemory-policy noeviction), "+
			"so the script cannot count requests; decisions follow the fail mode until memory is freed",
			"server", d.addr, "failures_not_logged", held, "err", err)
	}
}
