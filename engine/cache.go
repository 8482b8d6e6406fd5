package engine

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// knownCache keeps, per key the engine has seen recently, what Redis last
// said about it: per window, the entries it held just after the answer,
// when its oldest entry leaves and, when it is full, when it has room
// again. Two things use it:
//
//   - cached denials: a request whose keys are all known, with one window
//     still full and none whose oldest entry may have left since, is
//     denied without a Redis call, with exactly the state a Redis denial
//     would report (see deny);
//   - the FailLocal fallback, which starts each key from the known state
//     instead of from nothing (see localLimiter.seed).
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
	mu sync.Mutex
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
	buf   [2]knownWin // wins of a key with at most two windows
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

func (k *knownCache) shard(key string) *knownShard {
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
	full := false
	var at int64
	for i, key := range p.keys {
		sh := k.shard(key)
		sh.mu.Lock()
		kk := sh.m[key]
		// Known from an answer that cannot have missed an invalidation,
		// recent enough (keys deleted behind the engine's back, a FLUSHALL,
		// are seen again within maxAge), and not from the future (a test
		// clock that went back).
		ok := kk != nil && kk.sent >= since && len(kk.wins) > 0 && now >= kk.sent && now-kk.sent < maxAge
		for j := p.kstart[i]; ok && j < p.kstart[i+1]; j++ {
			kw := kk.find(p.wins[j])
			if kw == nil || kw.used > 0 && now >= kk.sent+kw.reset {
				ok = false
				break
			}
			var reset, wait int64
			if kw.used > 0 {
				reset = kk.recv + kw.reset - now
			}
			if kw.wait > 0 {
				// now < sent+reset <= sent+wait: still full.
				full = true
				wait = kk.recv + kw.wait - now
			}
			c.res[3*j], c.res[3*j+1], c.res[3*j+2] = kw.used, reset, wait
		}
		if ok {
			at = max(at, kk.at+now-kk.recv)
		}
		sh.mu.Unlock()
		if !ok {
			return false
		}
	}
	if !full {
		return false
	}
	c.status, c.suffix = statusDenied, 0
	c.sec, c.usec = at/1e6, at%1e6
	return true
}

// find returns the known window with w's period and limit, or nil.
func (kk *knownKey) find(w window) *knownWin {
	for i := range kk.wins {
		if kw := &kk.wins[i]; kw.period == w.period && kw.limit == w.limit {
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
	counted := c.status == statusAdmitted && c.mode == opAllow
	at := c.sec*1e6 + c.usec
	for i, key := range p.keys {
		if p.kw[i] {
			// A weighted key's fullness depends on each request's cost,
			// and its counts on merged entries: it makes no cached denial
			// and seeds nothing (the fallback starts it from nothing).
			continue
		}
		sh := k.shard(key)
		sh.mu.Lock()
		kk := sh.entry(key, k.perShard, recv)
		// An answer sent before an invalidation (or before a newer answer)
		// may describe entries that are gone.
		if sent < kk.inval || sent < kk.sent {
			sh.mu.Unlock()
			continue
		}
		kk.sent, kk.recv, kk.wall, kk.at = sent, recv, wall, at
		kk.wins = kk.buf[:0]
		for j := p.kstart[i]; j < p.kstart[i+1]; j++ {
			w := p.wins[j]
			used, reset, wait := c.res[3*j], c.res[3*j+1], c.res[3*j+2]
			if counted {
				if used == 0 {
					reset = w.period // the request itself is the oldest
				}
				used++
				// Admitted, so there was room: full now only when this
				// request filled it, until its oldest entry leaves.
				wait = 0
				if used >= w.limit {
					wait = reset
				}
			}
			kk.wins = append(kk.wins, knownWin{period: w.period, limit: w.limit, used: used, reset: reset, wait: wait})
		}
		sh.mu.Unlock()
	}
}

// get returns a copy of key's known state, if any.
func (k *knownCache) get(key string) (knownKey, bool) {
	sh := k.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	kk := sh.m[key]
	if kk == nil || len(kk.wins) == 0 {
		return knownKey{}, false
	}
	cp := *kk
	cp.wins = append([]knownWin(nil), kk.wins...)
	return cp, true
}

// invalidate forgets what is known about key at now (e.mono) and keeps
// answers sent before now from being stored: entries were removed from it
// (a Reset, a give-back, a rollback), so a full window may have room.
func (k *knownCache) invalidate(key string, now int64) {
	sh := k.shard(key)
	sh.mu.Lock()
	kk := sh.entry(key, k.perShard, now)
	kk.inval = max(kk.inval, now)
	kk.wins = kk.wins[:0]
	sh.mu.Unlock()
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
