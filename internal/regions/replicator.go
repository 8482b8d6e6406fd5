package regions

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis client the replicator uses; every
// client the engine takes satisfies it.
type Client interface {
	Pipeline() redis.Pipeliner
}

// Defaults of Config.
//
// DefaultBatch keeps a script call short: a peer's server applies about 6
// µs of work per entry (docs/regions.md), so a call of 128 blocks it
// under a millisecond, the same per entry as calls of 512.
const (
	DefaultBatch = 128
	DefaultEvery = 10 * time.Millisecond
	DefaultQueue = 1 << 16
	// tripCalls is the most script calls of Batch entries one round trip
	// to a peer carries, in one pipeline: one trip at a time per peer
	// replicates up to tripCalls × Batch entries per round trip (8,192;
	// 102,400 a second across an 80 ms round trip).
	tripCalls = 64
	// flushFor is the most Close waits for the queues to drain.
	flushFor = time.Second
	// callTimeout bounds one batch's round trip to a peer.
	callTimeout = 2 * time.Second
	// backoff is the most a peer that failed waits before it is tried
	// again.
	backoff = time.Second
	// drainFor bounds Close's last removal of acknowledged entries.
	drainFor = 200 * time.Millisecond
)

// Config configures a Replicator.
type Config struct {
	// Name is this region's name and Prefix the engine's key prefix:
	// with both, the replicator keeps the flags that tell a peer this
	// region has not sent it everything since they were apart (see
	// BehindKey).
	Name, Prefix string
	// Local is the region's own Redis, whose count keys lose the copies
	// of the admissions every peer has acknowledged (see CopyPrefix).
	Local Client
	// Peers maps each peer region's name to a client of its Redis.
	Peers map[string]Client
	// Log receives a warning when a peer becomes unreachable and an info
	// line when it is back, once each time.
	Log *slog.Logger
	// Invalidate, when not nil, makes the command sent to a peer with the
	// resets it applies (see Invalidation).
	Invalidate Invalidation
	// Batch is the most entries one script call to a peer carries (a
	// round trip carries up to tripCalls of them, so that replication
	// keeps up with a fast region across a slow link); Every how long
	// the replicator waits to fill a batch; Queue the most entries
	// waiting per peer. Zero means the default.
	Batch int
	Every time.Duration
	Queue int
}

// behindTTL is how long a flag that a region is behind with a peer lives
// unless refreshed: a process that dies holds its peers back that long.
// behindAfter is the age of an unsent entry that sets the flag: above a
// round trip and a batch between regions. watchEvery is how often the
// watcher looks.
const (
	behindTTL   = 5 * time.Second
	behindAfter = 250 * time.Millisecond
	watchEvery  = 50 * time.Millisecond
)

// BehindKey returns the key, in the region's own Redis, that says it has
// entries for peer that it could not send: written after a failed send,
// removed once they are sent. A peer reads it in each call that applies
// its own entries here, and while it is set keeps those entries unstable:
// a region that sees its own admissions acknowledged before it has
// received what its peers admitted while they were apart would take its
// share of a headroom they already used (docs/regions.md, After healing).
func BehindKey(prefix, peer string) string { return prefix + "{regions}:behind:" + peer }

func (r *Replicator) behindKey(peer string) string {
	if r.cfg.Name == "" {
		return ""
	}
	return BehindKey(r.cfg.Prefix, peer)
}

// pending is an entry on its way to the peers. left counts the peers that
// have not acknowledged it; an entry a full queue dropped never reaches 0
// (it stays unstable in the local Redis until it leaves its window, which
// costs capacity, never the bound).
type pending struct {
	Entry
	queued time.Time
	left   atomic.Int32
	// boxed is Entry's key, stamp and member as script arguments, boxed
	// once for every peer's batches (newPending); zero in a pending made
	// otherwise, which wire boxes at each use.
	boxed wire
}

// wire is an entry's fields as script arguments.
type wire struct{ key, stamp, member any }

// newPending returns e queued now, its arguments boxed.
func newPending(e Entry) *pending {
	return &pending{Entry: e, queued: time.Now(), boxed: wire{key: e.Key, stamp: e.Stamp, member: e.Member}}
}

// wire returns p's fields as script arguments.
func (p *pending) wire() wire {
	if p.boxed.key != nil {
		return p.boxed
	}
	return wire{key: p.Key, stamp: p.Stamp, member: p.Member}
}

// A Replicator sends entries to every peer in the background (see the
// package documentation). Its methods are safe for concurrent use.
type Replicator struct {
	cfg    Config
	peers  []*peer
	stable chan []*pending // acknowledged by every peer, for the local ZREM of their copies
	stop   chan struct{}
	ctx    context.Context // of the senders' calls, cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	once   sync.Once
}

// New starts a Replicator; Close stops it.
func New(cfg Config) *Replicator {
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Replicator{cfg: cfg, stable: make(chan []*pending, 64), stop: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	names := make([]string, 0, len(cfg.Peers))
	for name := range cfg.Peers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := &peer{name: name, client: cfg.Peers[name], r: r, wake: make(chan struct{}, 1)}
		p.reachable.Store(true)
		r.peers = append(r.peers, p)
	}
	r.wg.Add(len(r.peers) + 1)
	for _, p := range r.peers {
		go p.run()
	}
	go r.stabilizer()
	if r.cfg.Name != "" && r.cfg.Local != nil && len(r.peers) > 0 {
		r.wg.Add(1)
		go r.watch()
	}
	return r
}

// watch keeps each peer's flag that this region is behind with it (see
// BehindKey) until the replicator stops.
func (r *Replicator) watch() {
	defer r.wg.Done()
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-tick.C:
			for _, p := range r.peers {
				p.mark(now)
			}
		}
	}
}

// Add queues e for every peer. It never blocks: a peer whose queue is
// full does not get e, which then stays unstable locally until it leaves
// its window. After Close it does nothing.
func (r *Replicator) Add(e Entry) {
	if r.closed.Load() || len(r.peers) == 0 {
		return
	}
	p := newPending(e)
	p.left.Store(int32(len(r.peers)))
	for _, pr := range r.peers {
		if !pr.push(p) {
			p.left.Add(1) // never acknowledged by every peer
		}
	}
}

// PeerStats is what the replicator reports of one peer.
type PeerStats struct {
	Region    string        // the peer's name
	Lag       time.Duration // age of its oldest unacknowledged entry; 0 when none
	Queue     int           // entries waiting for it
	Dropped   int64         // entries its full queue refused, since New
	Reachable bool          // whether its last call succeeded
}

// Stats returns every peer's figures, ordered by name.
func (r *Replicator) Stats() []PeerStats {
	out := make([]PeerStats, 0, len(r.peers))
	now := time.Now()
	for _, p := range r.peers {
		p.mu.Lock()
		s := PeerStats{Region: p.name, Queue: len(p.queue), Dropped: p.dropped, Reachable: p.reachable.Load()}
		if len(p.queue) > 0 {
			s.Lag = now.Sub(p.queue[0].queued)
		}
		p.mu.Unlock()
		out = append(out, s)
	}
	return out
}

// Close sends what is queued for at most about a second, then stops every
// goroutine and returns. Entries not sent stay unstable locally. Close is
// idempotent.
func (r *Replicator) Close() {
	r.once.Do(func() {
		r.closed.Store(true)
		deadline := time.Now().Add(flushFor)
		for _, p := range r.peers {
			p.flushUntil(deadline)
		}
		r.cancel()
		close(r.stop)
		r.wg.Wait()
	})
}

// acked records that a peer acknowledged entries: the admissions every
// peer has acknowledged go to the stabilizer.
func (r *Replicator) acked(entries []*pending) {
	var done []*pending
	for _, p := range entries {
		if p.left.Add(-1) == 0 && !p.Remove && !p.Block && !p.Reset {
			done = append(done, p)
		}
	}
	if len(done) > 0 {
		select {
		case r.stable <- done:
		default: // the stabilizer is behind: these stay unstable, trimmed with their window
		}
	}
}

// stabilizer removes the copies of acknowledged admissions from the
// local count keys, merging what arrives within one batch period.
func (r *Replicator) stabilizer() {
	defer r.wg.Done()
	for {
		var batch []*pending
		select {
		case <-r.stop:
			r.drainStable()
			return
		case b := <-r.stable:
			batch = b
		}
		timer := time.NewTimer(r.cfg.Every)
	merge:
		for len(batch) < r.cfg.Batch {
			select {
			case b := <-r.stable:
				batch = append(batch, b...)
			case <-timer.C:
				break merge
			case <-r.stop:
				break merge
			}
		}
		timer.Stop()
		r.removeStable(r.ctx, batch)
	}
}

// drainStable removes what is acknowledged when the replicator stops,
// waiting at most drainFor on the local Redis.
func (r *Replicator) drainStable() {
	ctx, cancel := context.WithTimeout(context.Background(), drainFor)
	defer cancel()
	for {
		select {
		case b := <-r.stable:
			r.removeStable(ctx, b)
		default:
			return
		}
	}
}

// removeStable removes the copies of batch's entries from the local
// count keys.
func (r *Replicator) removeStable(ctx context.Context, batch []*pending) {
	if r.cfg.Local == nil || len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	// A failure leaves the entries unstable: they leave with their window.
	_ = stabilize(ctx, r.cfg.Local, batch, r.cfg.Batch)
}
