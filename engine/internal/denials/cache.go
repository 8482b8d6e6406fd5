package denials

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
)

// Cache keeps, per key the engine has seen recently, what Redis last
// said about it: per window, the entries it held just after the answer,
// when its oldest entry leaves and, when it is full, when it has room
// again. Two things use it:
//
//   - cached denials: a request whose keys are all known and count every
//     request alike, with one window still full and none whose oldest
//     entry may have left since, is denied without a Redis call, with
//     exactly the state a Redis denial would report (see Deny);
//   - the FailLocal fallback, which starts each key from the known state
//     (or a concurrent answer's higher counts: see floor.go)
//     instead of from nothing (fallback.Limiter.seed), keys counted in
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
type Cache struct {
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
	// looks nothing up (most answers of a rule far from its limits).
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
	m  map[string]*Key
}

// Key is what Redis last said about one key.
type Key struct {
	Sent  int64 // e.mono when the answer's batch was sent
	Recv  int64 // e.mono when the answer arrived
	Wall  int64 // local wall clock (µs since 1970) when it arrived
	at    int64 // Redis time of the answer (µs since 1970)
	inval int64 // e.mono of the last invalidation: older answers are not kept
	Wins  []Win
	buf   [3]Win // wins of a key with at most three windows

	// seed holds the windows of the last answer an invalidation cleared
	// (raised to the floor's counts), with its sent and wall, for the
	// local fallback only (see seedOf):
	// entries were removed, so they may overstate the key, which errs on
	// denying, where forgetting them gave the key its whole limit again.
	seed               []Win
	seedSent, seedWall int64

	// floor holds counts of answers Redis may have decided after the
	// kept one, for the local fallback only (see floor.go).
	floor []floorWin

	// The key's block (Check.Block), from the last answer that read it:
	// bsent, brecv and bwall are sent, recv and wall of that answer, bat
	// its Redis time, bleft the µs its block had left (0: none) and bwait
	// the longest wait of the key's windows, the block's included.
	bsent, brecv, bwall, bat, bleft, bwait int64
}

// Win is one window of a known key, just after the answer.
type Win struct {
	Period, Limit int64
	Used          int64 // entries in the window
	Reset         int64 // µs from the answer until its oldest entry leaves; 0 when empty, codec.ResetUnread when not read (the key then makes no cached denial)
	Wait          int64 // µs from the answer until it has room for a request; 0 when it has room
}

func New(maxKeys int) *Cache {
	k := &Cache{seed: maphash.MakeSeed(), perShard: max(1, (maxKeys+cacheShards-1)/cacheShards)}
	for i := range k.shards {
		k.shards[i].m = make(map[string]*Key)
	}
	return k
}

// shard returns the shard of key, picked by its hash tag: every key of a
// subject (its count, cost, slot, calendar and block keys) shares one
// shard, so that deny takes one lock for a request's keys of a subject.
func (k *Cache) shard(key string) *knownShard {
	if i := strings.LastIndexByte(key, '}'); i >= 0 {
		key = key[:i+1]
	}
	return &k.shards[maphash.String(k.seed, key)%cacheShards]
}

// Trusted reports whether cached denials may be made when elapsed µs of
// real time have passed since the engine started: the subscription is
// confirmed and was heard from recently. It returns since.
func (k *Cache) Trusted(elapsed int64) (since int64, ok bool) {
	since = k.since.Load()
	return since, since != 0 && elapsed-k.heard.Load() < trustFor
}

// Lost records that the invalidation subscription broke: no cached denial
// is made until it is confirmed again.
func (k *Cache) Lost() { k.since.Store(0) }

// Confirmed records that the subscription was confirmed at now (e.mono)
// and heard from at heard (e.elapsed).
func (k *Cache) Confirmed(now, heard int64) {
	k.heard.Store(heard)
	k.since.Store(max(now, 1))
}

// HeardAt records that the subscription was heard from at heard
// (e.elapsed): a message or a pong.
func (k *Cache) HeardAt(heard int64) { k.heard.Store(heard) }

// Deny decides the request of plan p from the cache at now (e.mono; elapsed
// is e.elapsed) when it can: every key of p is known from an answer received
// since the subscription was confirmed, no window's oldest entry can have
// left since that answer (so every count is still exact), and one window is
// full. It then fills res and bleft (see codec.ReadOp) as the script would
// have and returns the denial's Redis time (µs since 1970) and true;
// otherwise it changes nothing that matters and returns false.
func (k *Cache) Deny(p *plan.Plan, res, bleft []int64, now, elapsed int64) (at int64, ok bool) {
	since, ok := k.Trusted(elapsed)
	if !ok {
		return 0, false
	}
	if p.Blocked > 0 {
		// A denial of a key with a block must reach Redis, where it
		// starts the block; once started, the block denies from here.
		return k.blocked(p, res, bleft, now, since)
	}
	if now >= k.fullUntil.Load() {
		return 0, false
	}
	full := false
	var sh *knownShard // locked while the next key may share it
	for i, key := range p.Keys {
		if p.Colocated(i) {
			continue // known in its rate key's entry
		}
		if p.Priced(i) {
			// Its fullness depends on each request's cost: known for
			// the fallback only (see Store).
			if sh != nil {
				sh.mu.RUnlock()
			}
			return 0, false
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
		ok := kk != nil && kk.Sent >= since && len(kk.Wins) > 0 && now >= kk.Sent && now-kk.Sent < maxAge &&
			kk.fill(p, res, i, 1, now, &full)
		for ci := range p.Cals {
			if ok && p.Cals[ci].Parent == int32(i) && p.Colocated(ci) {
				ok = kk.fill(p, res, ci, -1, now, &full)
			}
		}
		if !ok {
			sh.mu.RUnlock()
			return 0, false
		}
		at = max(at, kk.at+now-kk.Recv)
	}
	if sh != nil {
		sh.mu.RUnlock()
	}
	return at, full
}

// fill fills res, the state of the windows of key i of p, from kk at now
// (e.mono), and sets *full when one is full; it reports false when one is
// not known or may have lost its oldest entry since the answer. sign is
// -1 for a calendar key known in its rate key's entry (see plan.Plan.Colocated).
func (kk *Key) fill(p *plan.Plan, res []int64, i int, sign, now int64, full *bool) bool {
	for j := p.WinStart[i]; j < p.WinStart[i+1]; j++ {
		kw := kk.Find(plan.Window{Period: sign * p.Wins[j].Period, Limit: p.Wins[j].Limit})
		if kw == nil || kw.Used > 0 && now >= kk.Sent+kw.Reset {
			return false
		}
		if kw.Wait > 0 && now >= kk.Sent+kw.Wait {
			// A share denial's hold ended (plan.Plan.ShareHeld); a full
			// window's wait is never shorter than its reset, seen above.
			return false
		}
		var reset, wait int64
		if kw.Used > 0 {
			reset = kk.Recv + kw.Reset - now
		}
		if kw.Wait > 0 {
			// now < sent+reset <= sent+wait: still full.
			*full = true
			wait = kk.Recv + kw.Wait - now
		}
		res[3*j], res[3*j+1], res[3*j+2] = kw.Used, reset, wait
	}
	return true
}

// calParent returns the rate key that calendar key key (or its block key)
// extends, or "" when key is not one: it invalidates its rate key's entry
// too (see plan.Plan.Colocated).
func calParent(key string) string {
	if i := strings.LastIndex(key, plan.CalSuffix); i > strings.LastIndexByte(key, '}') {
		return key[:i]
	}
	return ""
}

// blocked decides the request of p at now (e.mono) when a key of p is
// known to be blocked (Check.Block) by an answer received since the
// subscription was confirmed (since), at most maxAge old, whose block
// cannot have ended yet: deadlines start when that answer's batch was
// sent, so the cache never denies after the block ended in Redis, and the
// time left is counted from its arrival, so RetryAfter is never early. The
// windows report their last known state (zero for keys not known), as a
// blocked request counts nowhere. It fills res and bleft and returns the
// denial's Redis time and true, or changes nothing that matters and
// returns false.
func (k *Cache) blocked(p *plan.Plan, res, bleft []int64, now, since int64) (at int64, ok bool) {
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
			bleft[i] = kk.brecv + kk.bleft - now
			res[3*p.WinStart[i]+2] = kk.brecv + kk.bwait - now
			at = max(at, kk.bat+now-kk.brecv)
		}
		sh.mu.RUnlock()
	}
	if !found {
		return 0, false
	}
	for i, key := range p.Keys {
		kn, ok := k.Get(key)
		left, wait := bleft[i], int64(0)
		if left > 0 {
			wait = res[3*p.WinStart[i]+2]
		}
		for j := p.WinStart[i]; j < p.WinStart[i+1]; j++ {
			var used, reset, w int64
			if kw := kn.Find(p.Wins[j]); ok && kw != nil {
				if kw.Used > 0 && now < kn.Sent+kw.Reset {
					used, reset = kw.Used, kn.Recv+kw.Reset-now
				}
				// A full window's wait ends with its edge entry's
				// departure, which only a removal (an invalidation)
				// brings forward.
				if kw.Wait > 0 {
					w = max(0, kn.Recv+kw.Wait-now)
				}
			}
			res[3*j], res[3*j+1], res[3*j+2] = used, reset, w
		}
		codec.BlockedFor(p, res, bleft, i, wait)
		bleft[i] = left
	}
	return at, true
}

// storeBlock keeps key i's block as answered (bleft, res). Called with the key's
// shard locked.
func (kk *Key) storeBlock(p *plan.Plan, res, bleft []int64, i int, sent, recv, wall, at int64) {
	kk.bsent, kk.brecv, kk.bwall, kk.bat, kk.bleft = sent, recv, wall, at, bleft[i]
	kk.bwait = 0
	for j := p.WinStart[i]; j < p.WinStart[i+1]; j++ {
		kk.bwait = max(kk.bwait, res[3*j+2])
	}
}

// BlockEnd returns when the key's known block ends, on the local wall
// clock in µs since 1970, or 0 when no block is known.
func (kk *Key) BlockEnd() int64 {
	if kk.bleft <= 0 {
		return 0
	}
	return kk.bwall + kk.bleft
}

// Find returns the known window with w's period and limit, or nil.
func (kk *Key) Find(w plan.Window) *Win {
	for i := range kk.Wins {
		if kw := &kk.Wins[i]; kw.Period == w.Period && kw.Limit == w.Limit {
			return kw
		}
	}
	return nil
}

// Store keeps what Redis answered at Redis time at to the request of plan
// p (res and bleft, see codec.ReadOp; counted: it was admitted and
// counted), sent and received at sent and recv (e.mono) and wall: each
// window's count just after the decision, its oldest entry and, when full,
// the time it has room again.
func (k *Cache) Store(p *plan.Plan, res, bleft []int64, counted bool, at, sent, recv, wall int64) {
	for i, key := range p.Keys {
		if p.Slot[i] || p.Colocated(i) {
			// A slot frees whenever a request ends, in any process, so
			// no answer says how long a slot key stays full: it is not
			// kept. A colocated calendar key is stored with its rate
			// key. A priced key (a weighted key, or the calendar key of
			// a rule with a cost) is kept, but its fullness depends
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
			(bleft[i] > 0 || kk.bleft == 0 || sent > kk.brecv) {
			kk.storeBlock(p, res, bleft, i, sent, recv, wall, at)
		}
		// An answer sent before an invalidation may describe entries that
		// are gone.
		if sent < kk.inval {
			sh.mu.Unlock()
			continue
		}
		var buf [6]Win // a rate key's windows and its calendar key's
		ws := keep(buf[:0], p, res, i, 1, counted)
		for ci := range p.Cals {
			if p.Cals[ci].Parent == int32(i) && p.Colocated(ci) {
				ws = keep(ws, p, res, ci, -1, counted)
			}
		}
		if sent < kk.Sent {
			// Sent before the kept answer, so not kept, but Redis may
			// have decided it last: the fallback starts from no less
			// (see floor). One that came before the kept one was sent
			// was decided before it.
			if recv >= kk.Sent {
				kk.lift(ws, recv, wall)
			}
			sh.mu.Unlock()
			continue
		}
		// The answer it replaces had not arrived when this call was
		// sent: Redis may have decided that one last.
		var prev [len(buf)]Win
		was, wasRecv, wasWall := prev[:0], kk.Recv, kk.Wall
		if sent <= kk.Recv {
			was = append(was, kk.Wins...)
		}
		kk.prune(sent)
		kk.Sent, kk.Recv, kk.Wall, kk.at = sent, recv, wall, at
		kk.Wins, kk.seed = append(kk.buf[:0], ws...), nil
		for _, w := range ws {
			if w.Wait > 0 {
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
// can make cached denials until then (see Deny and maxAge).
func (k *Cache) mayDenyUntil(t int64) {
	for {
		cur := k.fullUntil.Load()
		if t <= cur || k.fullUntil.CompareAndSwap(cur, t) {
			return
		}
	}
}

// keep appends to ws the windows of key i of p just after the answer res
// (counted: the request was admitted and counted), with their periods
// times sign (see plan.Plan.Colocated), and returns it.
func keep(ws []Win, p *plan.Plan, res []int64, i int, sign int64, counted bool) []Win {
	for j := p.WinStart[i]; j < p.WinStart[i+1]; j++ {
		w := p.Wins[j]
		used, reset, wait := res[3*j], res[3*j+1], res[3*j+2]
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
		if wait == 0 && reset > 0 && p.HasUnstable(i) && p.Share.Full(used, w.Limit) {
			// Full for this region's share until an entry leaves (see
			// plan.Share.Full): at the latest its oldest.
			wait = reset
		} else if held, ok := p.ShareHeld(i); wait == 0 && ok && p.Share.Near(used, w.Limit) {
			// Denied by this region's share, which an acknowledgement
			// may lift any time: held briefly (see fill).
			wait = held
		}
		ws = append(ws, Win{Period: sign * w.Period, Limit: w.Limit, Used: used, Reset: reset, Wait: wait})
	}
	return ws
}

// Get returns a copy of key's known state, if any: its own entry's, or
// for a calendar key known in its rate key's entry (see plan.Plan.Colocated), that
// entry's with the calendar key's windows only.
func (k *Cache) Get(key string) (Key, bool) {
	sh := k.shard(key)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	kn, _, _, ok := sh.get(key)
	return kn, ok
}

// get does Cache.Get's work in sh, which holds key, and also returns
// the entry the state comes from and, when it is key's rate key's, the
// nominal period of key's windows there (negated: see colocated), else 0.
// Called with sh.mu held.
func (sh *knownShard) get(key string) (cp Key, from *Key, nominal int64, ok bool) {
	kk := sh.m[key]
	if kk == nil || len(kk.Wins) == 0 && kk.bleft == 0 {
		parent := calParent(key)
		if parent == "" {
			return Key{}, nil, 0, false
		}
		if kk = sh.m[parent]; kk == nil || len(kk.Wins) == 0 {
			return Key{}, nil, 0, false
		}
		nominal = plan.CalNominal(string(key[len(parent)+len(plan.CalSuffix):]))
		cp = Key{Sent: kk.Sent, Recv: kk.Recv, Wall: kk.Wall, at: kk.at}
		for _, w := range kk.Wins {
			if w.Period == -nominal {
				w.Period = nominal
				cp.Wins = append(cp.Wins, w)
			}
		}
		return cp, kk, nominal, len(cp.Wins) > 0
	}
	cp = *kk
	cp.Wins, cp.seed, cp.floor = nil, nil, nil // the entry's, changed under sh.mu
	for _, w := range kk.Wins {
		if w.Period > 0 { // not a calendar key's (see plan.Plan.Colocated)
			cp.Wins = append(cp.Wins, w)
		}
	}
	return cp, kk, 0, true
}

// SeedOf returns what the local fallback starts key from: get's state,
// raised to the counts of answers Redis may have decided after it (see
// floor), or when an invalidation cleared it, the answer it cleared (so
// raised). A give-back, a rollback or a Reset removed entries since, so
// that answer errs on denying; without it, an outage gave a subject this
// process had seen its whole limit again. A calendar key kept in its rate
// key's entry (see plan.Plan.Colocated) finds that answer there, as get does;
// without it, an outage gave a calendar day's whole limit again.
func (k *Cache) SeedOf(key string) (Key, bool) {
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
			return Key{}, false
		}
		if kk = sh.m[parent]; kk == nil || len(kk.seed) == 0 {
			return Key{}, false
		}
		nominal = plan.CalNominal(string(key[len(parent)+len(plan.CalSuffix):]))
	}
	cp := Key{Sent: kk.seedSent, Wall: kk.seedWall}
	for _, w := range kk.seed {
		switch {
		case nominal == 0 && w.Period > 0:
			cp.Wins = append(cp.Wins, w)
		case nominal != 0 && w.Period == -nominal:
			w.Period = nominal
			cp.Wins = append(cp.Wins, w)
		}
	}
	return cp, len(cp.Wins) > 0
}

// Invalidate forgets what is known about key at now (e.mono) and keeps
// answers sent before now from being stored: entries were removed from it
// (a Reset, a give-back, a rollback), so a full window may have room.
func (k *Cache) Invalidate(key string, now int64) {
	sh := k.shard(key)
	sh.mu.Lock()
	sh.invalidate(key, k.perShard, now)
	if parent := calParent(key); parent != "" {
		sh.invalidate(parent, k.perShard, now) // it may hold key's windows
	}
	sh.mu.Unlock()
}

// invalidate does Cache.Invalidate's work in sh, which holds key.
// Called with sh.mu held.
func (sh *knownShard) invalidate(key string, most int, now int64) {
	kk := sh.entry(key, most, now)
	kk.inval = max(kk.inval, now)
	if len(kk.Wins) > 0 {
		seed := Key{Wins: append(kk.seed[:0], kk.Wins...), Wall: kk.Wall}
		seed.raise(kk.floor, func(period int64) int64 { return period })
		kk.seed, kk.seedSent, kk.seedWall = seed.Wins, kk.Sent, seed.Wall
	}
	kk.Wins, kk.floor = kk.Wins[:0], kk.floor[:0]
	kk.bleft = 0
}

// entry returns key's state, creating it (and making room, at most most
// keys) if needed. Called with sh.mu held.
func (sh *knownShard) entry(key string, most int, now int64) *Key {
	kk := sh.m[key]
	if kk == nil {
		if len(sh.m) >= most {
			sh.evict(now)
		}
		kk = &Key{}
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
		for _, w := range kk.Wins {
			longest = max(longest, w.Reset, w.Wait)
		}
		longest = max(longest, kk.bleft)
		if now-max(kk.Sent+longest, kk.inval+maxTombstone) > 0 {
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
