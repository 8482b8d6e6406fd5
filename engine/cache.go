package engine

import (
	"context"
	"errors"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
)

// knownCache keeps, per key the engine has seen recently, what Redis last
// said about it: per window, the entries it held just after the answer,
// when its oldest entry leaves and, when it is full, when it has room
// again. Two things use it:
//
//   - cached denials: a request whose keys are all known and count every
//     request alike, with one window still full and none whose oldest
//     entry may have left since, is denied without a Redis call, with
//     exactly the state a Redis denial would report (see deny);
//   - the FailLocal fallback, which starts each key from the known state
//     (or a concurrent answer's higher counts: see cachefloor.go)
//     instead of from nothing (see localLimiter.seed), keys counted in
//     units (bytes) and keys counting distinct values included (the
//     latter seed with their number of values: the fallback counts
//     requests there, see Check.Distinct).
//
// Times are of two clocks and never mixed: the answer's deadlines are
// offsets from the answer, placed on the local monotonic clock (e.mono)
// either at the moment the batch was sent, for decisions (a deadline can
// then only end early, never late), or at the moment the answer arrived,
// for what is reported to clients (a RetryAfter or Reset is never early).
//
// It is safe for concurrent use: keys are spread over shards, each with its
// own mutex, and at most perShard keys live in a shard.
type knownCache struct {
	seed     maphash.Seed
	perShard int
	shards   [cacheShards]knownShard

	// since is the e.mono time the invalidation subscription was last
	// confirmed (0 while there is none), and heard the real time
	// (e.elapsed) it last delivered anything. Answers stored before since may have
	// missed an invalidation, so they serve the fallback but never deny.
	since atomic.Int64
	heard atomic.Int64

	// fullUntil is the e.mono time after which no kept answer can make a
	// cached denial: the latest sent+maxAge of an answer that showed a
	// window full. Until a window fills, deny has nothing to find and
	// looks nothing up (most answers of a limiter far from its limits).
	fullUntil atomic.Int64
}

const (
	cacheShards = 64
	// maxAge is how long an answer can make cached denials: a key changed
	// without an invalidation (deleted by hand, FLUSHALL) is asked again
	// after at most that long, at the cost of one call per key and maxAge.
	maxAge = 1_000_000 // µs
	// trustFor is how long after the subscription last delivered something
	// (a message or the reply to a ping) cached denials are still made: a
	// Reset elsewhere must reach this process's cache within a second.
	trustFor = 800_000 // µs
)

type knownShard struct {
	mu sync.RWMutex // written by answers and invalidations, read by cached denials
	m  map[string]*knownKey
}

// knownKey is what Redis last said about one key.
type knownKey struct {
	sent  int64 // e.mono when the answer's batch was sent
	recv  int64 // e.mono when the answer arrived
	wall  int64 // local wall clock (µs since 1970) when it arrived
	at    int64 // Redis time of the answer (µs since 1970)
	inval int64 // e.mono of the last invalidation: older answers are not kept
	wins  []knownWin
	buf   [3]knownWin // wins of a key with at most three windows

	// seed holds the windows of the last answer an invalidation cleared
	// (raised to the floor's counts), with its sent and wall, for the
	// local fallback only (see seedOf):
	// entries were removed, so they may overstate the key, which errs on
	// denying, where forgetting them gave the key its whole limit again.
	seed               []knownWin
	seedSent, seedWall int64

	// floor holds counts of answers Redis may have decided after the
	// kept one, for the local fallback only (see cachefloor.go).
	floor []floorWin

	// The key's block (Check.Block), from the last answer that read it:
	// bsent, brecv and bwall are sent, recv and wall of that answer, bat
	// its Redis time, bleft the µs its block had left (0: none) and bwait
	// the longest wait of the key's windows, the block's included.
	bsent, brecv, bwall, bat, bleft, bwait int64
}

// knownWin is one window of a known key, just after the answer.
type knownWin struct {
	period, limit int64
	used          int64 // entries in the window
	reset         int64 // µs from the answer until its oldest entry leaves; 0 when empty
	wait          int64 // µs from the answer until it has room for a request; 0 when it has room
}

func newKnownCache(maxKeys int) *knownCache {
	k := &knownCache{seed: maphash.MakeSeed(), perShard: max(1, (maxKeys+cacheShards-1)/cacheShards)}
	for i := range k.shards {
		k.shards[i].m = make(map[string]*knownKey)
	}
	return k
}

// shard returns the shard of key, picked by its hash tag: every key of a
// subject (its count, cost, slot, calendar and block keys) shares one
// shard, so that deny takes one lock for a request's keys of a subject.
func (k *knownCache) shard(key string) *knownShard {
	if i := strings.LastIndexByte(key, '}'); i >= 0 {
		key = key[:i+1]
	}
	return &k.shards[maphash.String(k.seed, key)%cacheShards]
}

// trusted reports whether cached denials may be made when elapsed µs of
// real time have passed since the engine started: the subscription is
// confirmed and was heard from recently. It returns since.
func (k *knownCache) trusted(elapsed int64) (since int64, ok bool) {
	since = k.since.Load()
	return since, since != 0 && elapsed-k.heard.Load() < trustFor
}

// deny decides c from the cache at now (e.mono; elapsed is e.elapsed) when it can: every key of
// c is known from an answer received since the subscription was confirmed,
// no window's oldest entry can have left since that answer (so every count
// is still exact), and one window is full. It then fills c's outcome as
// the script would have and returns true; otherwise it changes nothing
// that matters and returns false.
func (k *knownCache) deny(c *call, now, elapsed int64) bool {
	since, ok := k.trusted(elapsed)
	if !ok {
		return false
	}
	p := &c.plan
	if p.Blocked > 0 {
		// A denial of a key with a block must reach Redis, where it
		// starts the block; once started, the block denies from here.
		return k.blocked(c, now, since)
	}
	if now >= k.fullUntil.Load() {
		return false
	}
	full := false
	var at int64
	var sh *knownShard // locked while the next key may share it
	for i, key := range p.Keys {
		if p.Colocated(i) {
			continue // known in its rate key's entry
		}
		if p.Priced(i) {
			// Its fullness depends on each request's cost: known for
			// the fallback only (see store).
			if sh != nil {
				sh.mu.RUnlock()
			}
			return false
		}
		if s := k.shard(key); s != sh {
			if sh != nil {
				sh.mu.RUnlock()
			}
			sh = s
			sh.mu.RLock()
		}
		kk := sh.m[key]
		// Known from an answer that cannot have missed an invalidation,
		// recent enough (keys deleted behind the engine's back, a FLUSHALL,
		// are seen again within maxAge), and not from the future (a test
		// clock that went back).
		ok := kk != nil && kk.sent >= since && len(kk.wins) > 0 && now >= kk.sent && now-kk.sent < maxAge &&
			kk.fill(c, i, 1, now, &full)
		for ci := range p.Cals {
			if ok && p.Cals[ci].Parent == int32(i) && p.Colocated(ci) {
				ok = kk.fill(c, ci, -1, now, &full)
			}
		}
		if !ok {
			sh.mu.RUnlock()
			return false
		}
		at = max(at, kk.at+now-kk.recv)
	}
	if sh != nil {
		sh.mu.RUnlock()
	}
	if !full {
		return false
	}
	c.status, c.suffix = codec.StatusDenied, 0
	c.sec, c.usec = at/1e6, at%1e6
	return true
}

// fill fills c's state of the windows of key i of c's plan from kk at now
// (e.mono), and sets *full when one is full; it reports false when one is
// not known or may have lost its oldest entry since the answer. sign is
// -1 for a calendar key known in its rate key's entry (see colocated).
func (kk *knownKey) fill(c *call, i int, sign, now int64, full *bool) bool {
	p := &c.plan
	for j := p.WinStart[i]; j < p.WinStart[i+1]; j++ {
		kw := kk.find(plan.Window{Period: sign * p.Wins[j].Period, Limit: p.Wins[j].Limit})
		if kw == nil || kw.used > 0 && now >= kk.sent+kw.reset {
			return false
		}
		var reset, wait int64
		if kw.used > 0 {
			reset = kk.recv + kw.reset - now
		}
		if kw.wait > 0 {
			// now < sent+reset <= sent+wait: still full.
			*full = true
			wait = kk.recv + kw.wait - now
		}
		c.res[3*j], c.res[3*j+1], c.res[3*j+2] = kw.used, reset, wait
	}
	return true
}

// calParent returns the rate key that calendar key key (or its block key)
// extends, or "" when key is not one: it invalidates its rate key's entry
// too (see colocated).
func calParent(key string) string {
	if i := strings.LastIndex(key, plan.CalSuffix); i > strings.LastIndexByte(key, '}') {
		return key[:i]
	}
	return ""
}

// blocked decides c from the cache at now (e.mono) when a key of c is
// known to be blocked (Check.Block) by an answer received since the
// subscription was confirmed (since), at most maxAge old, whose block
// cannot have ended yet: deadlines start when that answer's batch was
// sent, so the cache never denies after the block ended in Redis, and the
// time left is counted from its arrival, so RetryAfter is never early. The
// windows report their last known state (zero for keys not known), as a
// blocked request counts nowhere. It fills c's outcome and returns true,
// or changes nothing that matters and returns false.
func (k *knownCache) blocked(c *call, now, since int64) bool {
	p := &c.plan
	var at int64
	found := false
	for i, key := range p.Keys {
		if p.BlockOf(i) == 0 {
			continue
		}
		sh := k.shard(key)
		sh.mu.RLock()
		if kk := sh.m[key]; kk != nil && kk.bleft > 0 && kk.bsent >= since && now >= kk.bsent &&
			now-kk.bsent < maxAge && now < kk.bsent+kk.bleft {
			found = true
			// bleft holds the block's time left, res's wait of the
			// key's windows what it will be once set below.
			c.bleft[i] = kk.brecv + kk.bleft - now
			c.res[3*p.WinStart[i]+2] = kk.brecv + kk.bwait - now
			at = max(at, kk.bat+now-kk.brecv)
		}
		sh.mu.RUnlock()
	}
	if !found {
		return false
	}
	for i, key := range p.Keys {
		kn, ok := k.get(key)
		left, wait := c.bleft[i], int64(0)
		if left > 0 {
			wait = c.res[3*p.WinStart[i]+2]
		}
		for j := p.WinStart[i]; j < p.WinStart[i+1]; j++ {
			var used, reset, w int64
			if kw := kn.find(p.Wins[j]); ok && kw != nil {
				if kw.used > 0 && now < kn.sent+kw.reset {
					used, reset = kw.used, kn.recv+kw.reset-now
				}
				// A full window's wait ends with its edge entry's
				// departure, which only a removal (an invalidation)
				// brings forward.
				if kw.wait > 0 {
					w = max(0, kn.recv+kw.wait-now)
				}
			}
			c.res[3*j], c.res[3*j+1], c.res[3*j+2] = used, reset, w
		}
		c.blockedFor(i, wait)
		c.bleft[i] = left
	}
	c.status, c.suffix = codec.StatusDenied, 0
	c.sec, c.usec = at/1e6, at%1e6
	return true
}

// storeBlock keeps key i's block as answered to c. Called with the key's
// shard locked.
func (kk *knownKey) storeBlock(c *call, i int, sent, recv, wall, at int64) {
	kk.bsent, kk.brecv, kk.bwall, kk.bat, kk.bleft = sent, recv, wall, at, c.bleft[i]
	p := &c.plan
	kk.bwait = 0
	for j := p.WinStart[i]; j < p.WinStart[i+1]; j++ {
		kk.bwait = max(kk.bwait, c.res[3*j+2])
	}
}

// find returns the known window with w's period and limit, or nil.
func (kk *knownKey) find(w plan.Window) *knownWin {
	for i := range kk.wins {
		if kw := &kk.wins[i]; kw.period == w.Period && kw.limit == w.Limit {
			return kw
		}
	}
	return nil
}

// store keeps what Redis answered to c, which must have no error: each
// window's count just after the decision, its oldest entry and, when full,
// the time it has room again.
func (k *knownCache) store(c *call, sent, recv, wall int64) {
	p := &c.plan
	counted := c.status == codec.StatusAdmitted && c.mode == opAllow
	at := c.sec*1e6 + c.usec
	for i, key := range p.Keys {
		if p.Slot[i] || p.Colocated(i) {
			// A slot frees whenever a request ends, in any process, so
			// no answer says how long a slot key stays full: it is not
			// kept. A colocated calendar key is stored with its rate
			// key. A priced key (a weighted key, or the calendar key of
			// a limiter with a cost) is kept, but its fullness depends
			// on each request's cost: it makes no cached denial (see
			// deny), and its counts, in units, seed the fallback.
			continue
		}
		sh := k.shard(key)
		sh.mu.Lock()
		kk := sh.entry(key, k.perShard, recv)
		// An answer without a block replaces a known block only when its
		// call was sent after the block's answer came: one sent before
		// (a concurrent call) may have been decided before the block
		// started, and would make the fallback forget it. A lifted block
		// (Reset) invalidates the key anyway.
		if p.BlockOf(i) > 0 && sent >= kk.inval && sent >= kk.bsent &&
			(c.bleft[i] > 0 || kk.bleft == 0 || sent > kk.brecv) {
			kk.storeBlock(c, i, sent, recv, wall, at)
		}
		// An answer sent before an invalidation may describe entries that
		// are gone.
		if sent < kk.inval {
			sh.mu.Unlock()
			continue
		}
		var buf [6]knownWin // a rate key's windows and its calendar key's
		ws := keep(buf[:0], c, i, 1, counted)
		for ci := range p.Cals {
			if p.Cals[ci].Parent == int32(i) && p.Colocated(ci) {
				ws = keep(ws, c, ci, -1, counted)
			}
		}
		if sent < kk.sent {
			// Sent before the kept answer, so not kept, but Redis may
			// have decided it last: the fallback starts from no less
			// (see floor). One that came before the kept one was sent
			// was decided before it.
			if recv >= kk.sent {
				kk.lift(ws, recv, wall)
			}
			sh.mu.Unlock()
			continue
		}
		// The answer it replaces had not arrived when this call was
		// sent: Redis may have decided that one last.
		var prev [len(buf)]knownWin
		was, wasRecv, wasWall := prev[:0], kk.recv, kk.wall
		if sent <= kk.recv {
			was = append(was, kk.wins...)
		}
		kk.prune(sent)
		kk.sent, kk.recv, kk.wall, kk.at = sent, recv, wall, at
		kk.wins, kk.seed = append(kk.buf[:0], ws...), nil
		for _, w := range ws {
			if w.wait > 0 {
				k.mayDenyUntil(sent + maxAge)
				break
			}
		}
		kk.trim()
		kk.lift(was, wasRecv, wasWall)
		sh.mu.Unlock()
	}
}

// mayDenyUntil raises fullUntil to t: an answer that showed a window full
// can make cached denials until then (see deny's maxAge).
func (k *knownCache) mayDenyUntil(t int64) {
	for {
		cur := k.fullUntil.Load()
		if t <= cur || k.fullUntil.CompareAndSwap(cur, t) {
			return
		}
	}
}

// keep appends to ws the windows of key i of c's plan just after the
// answer to c (counted: c was admitted and counted), with their periods
// times sign (see colocated), and returns it.
func keep(ws []knownWin, c *call, i int, sign int64, counted bool) []knownWin {
	p := &c.plan
	for j := p.WinStart[i]; j < p.WinStart[i+1]; j++ {
		w := p.Wins[j]
		used, reset, wait := c.res[3*j], c.res[3*j+1], c.res[3*j+2]
		if counted {
			if used == 0 && reset == 0 {
				// The request itself is the oldest. (A calendar
				// window's reset is its period's end, always sent.)
				reset = w.Period
			}
			if !p.HeldAt(j) {
				// A distinct value a window held counts nothing anew
				// there (see Check.Distinct).
				used += p.Cost[i]
			}
			// Admitted, so there was room: full now only when this
			// request filled it, until its oldest entry leaves.
			wait = 0
			if used >= w.Limit {
				wait = reset
			}
		}
		ws = append(ws, knownWin{period: sign * w.Period, limit: w.Limit, used: used, reset: reset, wait: wait})
	}
	return ws
}

// get returns a copy of key's known state, if any: its own entry's, or
// for a calendar key known in its rate key's entry (see colocated), that
// entry's with the calendar key's windows only.
func (k *knownCache) get(key string) (knownKey, bool) {
	sh := k.shard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	kn, _, _, ok := sh.get(key)
	return kn, ok
}

// get does knownCache.get's work in sh, which holds key, and also returns
// the entry the state comes from and, when it is key's rate key's, the
// nominal period of key's windows there (negated: see colocated), else 0.
// Called with sh.mu held.
func (sh *knownShard) get(key string) (cp knownKey, from *knownKey, nominal int64, ok bool) {
	kk := sh.m[key]
	if kk == nil || len(kk.wins) == 0 && kk.bleft == 0 {
		parent := calParent(key)
		if parent == "" {
			return knownKey{}, nil, 0, false
		}
		if kk = sh.m[parent]; kk == nil || len(kk.wins) == 0 {
			return knownKey{}, nil, 0, false
		}
		nominal = plan.CalNominal(string(key[len(parent)+len(plan.CalSuffix):]))
		cp = knownKey{sent: kk.sent, recv: kk.recv, wall: kk.wall, at: kk.at}
		for _, w := range kk.wins {
			if w.period == -nominal {
				w.period = nominal
				cp.wins = append(cp.wins, w)
			}
		}
		return cp, kk, nominal, len(cp.wins) > 0
	}
	cp = *kk
	cp.wins, cp.seed, cp.floor = nil, nil, nil // the entry's, changed under sh.mu
	for _, w := range kk.wins {
		if w.period > 0 { // not a calendar key's (see colocated)
			cp.wins = append(cp.wins, w)
		}
	}
	return cp, kk, 0, true
}

// seedOf returns what the local fallback starts key from: get's state,
// raised to the counts of answers Redis may have decided after it (see
// floor), or when an invalidation cleared it, the answer it cleared (so
// raised). A give-back, a rollback or a Reset removed entries since, so
// that answer errs on denying; without it, an outage gave a subject this
// process had seen its whole limit again. A calendar key kept in its rate
// key's entry (see colocated) finds that answer there, as get does;
// without it, an outage gave a calendar day's whole limit again.
func (k *knownCache) seedOf(key string) (knownKey, bool) {
	sh := k.shard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	if kn, from, nominal, ok := sh.get(key); ok {
		kn.raise(from.floor, func(period int64) int64 {
			switch {
			case nominal == 0 && period > 0:
				return period
			case nominal != 0 && period == -nominal:
				return nominal
			}
			return 0
		})
		return kn, true
	}
	kk := sh.m[key]
	nominal := int64(0) // of key's windows in its rate key's entry; 0: key's own
	if kk == nil || len(kk.seed) == 0 {
		parent := calParent(key)
		if parent == "" {
			return knownKey{}, false
		}
		if kk = sh.m[parent]; kk == nil || len(kk.seed) == 0 {
			return knownKey{}, false
		}
		nominal = plan.CalNominal(string(key[len(parent)+len(plan.CalSuffix):]))
	}
	cp := knownKey{sent: kk.seedSent, wall: kk.seedWall}
	for _, w := range kk.seed {
		switch {
		case nominal == 0 && w.period > 0:
			cp.wins = append(cp.wins, w)
		case nominal != 0 && w.period == -nominal:
			w.period = nominal
			cp.wins = append(cp.wins, w)
		}
	}
	return cp, len(cp.wins) > 0
}

// invalidate forgets what is known about key at now (e.mono) and keeps
// answers sent before now from being stored: entries were removed from it
// (a Reset, a give-back, a rollback), so a full window may have room.
func (k *knownCache) invalidate(key string, now int64) {
	sh := k.shard(key)
	sh.mu.Lock()
	sh.invalidate(key, k.perShard, now)
	if parent := calParent(key); parent != "" {
		sh.invalidate(parent, k.perShard, now) // it may hold key's windows
	}
	sh.mu.Unlock()
}

// invalidate does knownCache.invalidate's work in sh, which holds key.
// Called with sh.mu held.
func (sh *knownShard) invalidate(key string, most int, now int64) {
	kk := sh.entry(key, most, now)
	kk.inval = max(kk.inval, now)
	if len(kk.wins) > 0 {
		seed := knownKey{wins: append(kk.seed[:0], kk.wins...), wall: kk.wall}
		seed.raise(kk.floor, func(period int64) int64 { return period })
		kk.seed, kk.seedSent, kk.seedWall = seed.wins, kk.sent, seed.wall
	}
	kk.wins, kk.floor = kk.wins[:0], kk.floor[:0]
	kk.bleft = 0
}

// entry returns key's state, creating it (and making room, at most most
// keys) if needed. Called with sh.mu held.
func (sh *knownShard) entry(key string, most int, now int64) *knownKey {
	kk := sh.m[key]
	if kk == nil {
		if len(sh.m) >= most {
			sh.evict(now)
		}
		kk = &knownKey{}
		sh.m[strings.Clone(key)] = kk // key may be a view of a reused buffer
	}
	return kk
}

// evict makes room for one key: first keys whose every entry has left
// (and whose invalidation is older than any answer still in flight could
// be), then arbitrary ones down to 90% of the shard's cap. Called with
// sh.mu held.
func (sh *knownShard) evict(now int64) {
	n := len(sh.m)
	for key, kk := range sh.m {
		longest := int64(0)
		for _, w := range kk.wins {
			longest = max(longest, w.reset, w.wait)
		}
		longest = max(longest, kk.bleft)
		if now-max(kk.sent+longest, kk.inval+maxTombstone) > 0 {
			delete(sh.m, key)
		}
	}
	for key := range sh.m {
		if len(sh.m) < n*9/10 {
			break
		}
		delete(sh.m, key)
	}
}

// maxTombstone is how long an invalidation is remembered at least, to
// stop answers in flight when it arrived: longer than any call's timeout.
const maxTombstone = 60_000_000 // µs

// Cached denials are only as good as the news of removed entries: a Reset,
// a give-back or a rollback in any process frees room that this process's
// cache does not see. Every process therefore publishes the keys it
// removed entries from on one channel (the key prefix + "invalidate"), after
// the removal took effect, and every process with the cache subscribes to
// it. A process that has not heard from its subscription for trustFor
// (it pings every pingEvery when there is no traffic) makes no cached
// denial until it hears again, and an answer stored before the current
// subscription was confirmed never denies: invalidations sent meanwhile
// may have been missed.

// Invalidation message kinds, the message's first byte; keys follow,
// separated by spaces (keys never hold a space: it is percent-encoded).
const (
	invalReset   = 'R' // the keys were deleted: forget them everywhere
	invalRemoved = 'E' // entries were removed: the known state is stale
)

const pingEvery = 250 * time.Millisecond

// subscriber is implemented by *redis.Client, *redis.ClusterClient and
// *redis.Ring.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

func (e *Engine) channel() string { return e.keyer.prefix + "invalidate" }

// listen starts the subscription to the invalidation channel. It waits up
// to a second (or the engine's timeout, if longer) for the first
// confirmation, so that a new engine makes cached denials from its first
// answers on; a Redis that refuses connections ends the wait at once, and
// one that does not answer yet only delays cached denials.
func (e *Engine) listen(s subscriber) {
	ps := s.Subscribe(context.Background(), e.channel())
	e.pubsub = ps
	e.listenDone = make(chan struct{})
	first := make(chan struct{})
	go e.receive(ps, first)
	select {
	case <-first:
	case <-time.After(max(e.timeout, time.Second)):
	}
}

// receive runs until Close: it applies invalidations, keeps the
// subscription's health in e.known, and pings when the channel is quiet.
func (e *Engine) receive(ps *redis.PubSub, first chan struct{}) {
	defer close(e.listenDone)
	ctx := context.Background()
	k := e.known
	for {
		msg, err := ps.ReceiveTimeout(ctx, pingEvery)
		if e.closed.Load() {
			return
		}
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			if !isTimeout(err) {
				// The connection broke; the next receive reconnects and
				// subscribes again. Until confirmed, nothing is trusted.
				k.since.Store(0)
				if first != nil { // New waits no longer for a Redis that is down
					close(first)
					first = nil
				}
				e.sleep(pingEvery)
			}
			_ = ps.Ping(ctx)
			continue
		}
		now, heard := e.monoElapsed()
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				k.heard.Store(heard)
				k.since.Store(max(now, 1))
				if first != nil {
					close(first)
					first = nil
				}
			}
		case *redis.Pong:
			k.heard.Store(heard)
		case *redis.Message:
			k.heard.Store(heard)
			e.applyInvalidation(m.Payload, now)
		}
	}
}

// sleep waits for d or until Close.
func (e *Engine) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-e.stop:
	}
}

func (e *Engine) applyInvalidation(payload string, now int64) {
	if payload == "" {
		return
	}
	kind, keys := payload[0], payload[1:]
	for key := range strings.FieldsSeq(keys) {
		e.known.invalidate(key, now)
		if kind == invalReset {
			e.local.forget(key)
		}
	}
}

// publishCmd returns the PUBLISH command announcing that entries were
// removed from keys (kind invalRemoved) or that keys were deleted
// (invalReset), or nil when there are no keys. Every engine publishes,
// also with cached denials off: other processes may have them on.
func (e *Engine) publishCmd(ctx context.Context, kind byte, keys ...string) *redis.IntCmd {
	if len(keys) == 0 {
		return nil
	}
	n := 1 + len(keys)
	for _, k := range keys {
		n += len(k)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte(kind)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k)
	}
	return redis.NewIntCmd(ctx, "publish", e.channel(), b.String())
}

// forgetKnown invalidates keys in this process's cache.
func (e *Engine) forgetKnown(keys []string) {
	if len(keys) == 0 {
		return // without reading the clock: most finishes forget nothing
	}
	now := e.mono()
	for _, k := range keys {
		e.known.invalidate(k, now)
	}
}

// publish announces removed entries after they were removed, and forgets
// them in this process's cache at once.
func (e *Engine) publish(ctx context.Context, kind byte, keys ...string) {
	cmd := e.publishCmd(ctx, kind, keys...)
	if cmd == nil {
		return
	}
	e.forgetKnown(keys)
	if err := e.client.Process(ctx, cmd); err != nil {
		e.log.Warn("engine: could not publish an invalidation; other processes' caches keep it until the subscription is renewed or the entries leave",
			"err", err)
	}
}
