// Package fallback is the engine's in-process limiter for rules.FailLocal,
// which decides while Redis fails.
package fallback

import (
	"slices"
	"strings"
	"sync"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/denials"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
)

// Limiter is the in-process fallback of rules.FailLocal: the same
// keys, windows and semantics as the script, in memory, counting only this
// process's requests. A slot key is a key whose one window is the lease:
// a slot is an entry that leaves at Release, or one lease after its
// admission (the fallback does not renew). It is safe for concurrent use (one mutex: it only
// runs while Redis fails).
//
// Memory is bounded: at most maxKeys keys, each holding the admission
// times within its retention, which the windows' limits bound (a key never
// holds more entries within its longest window than that window's limit).
// A key whose entries have all left its retention is dropped when next
// seen or when the key cap is reached; if every key is still live at the
// cap, arbitrary keys are dropped, forgetting their counts.
type Limiter struct {
	mu      sync.Mutex
	keys    map[string]*localKey
	maxKeys int
}

type localKey struct {
	times []int64 // admission times in µs, ascending
	ids   []int64 // the request id of each time, for GiveBack; seedID for seeds
	costs []int64 // the cost of each time (1 in count keys; a seed's, the units it stands for)
	ret   int64   // retention in µs: the longest window seen
	seed  int64   // wall time (µs) of the Redis answer the seeds stand for
	// seedSent is when that answer's call was sent (e.mono): answers are
	// ordered by it, as in the known cache, never by the wall clock, which
	// can stand still (a test clock) or step back.
	seedSent int64
	block    int64 // wall time (µs) its block ends (Check.Block); 0: none
}

// seedID marks entries that stand for what Redis last said (see seed).
const seedID = -1

// expired reports whether every entry of k has left its retention at t,
// and its block has ended.
func (k *localKey) expired(t int64) bool {
	return (len(k.times) == 0 || k.times[len(k.times)-1] <= t-k.ret) && k.block <= t
}

// New returns a Limiter of at most maxKeys keys.
func New(maxKeys int) *Limiter {
	return &Limiter{keys: make(map[string]*localKey), maxKeys: maxKeys}
}

// Decide decides the request of plan p at time t (µs) like the script,
// filling res and bleft (see codec.ReadOp): every window is read, and only
// when all have room is the request admitted and, for an allow (id is its
// id), t added to every key. Keys start from what Redis last said about
// them in known (see seed). It returns the op's status.
func (l *Limiter) Decide(p *plan.Plan, res, bleft []int64, allow bool, id, t int64, known *denials.Cache) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok := true
	for i, key := range p.Keys {
		var times, costs []int64
		k := l.keys[key]
		if k != nil && k.expired(t) {
			delete(l.keys, key)
			k = nil
		}
		kn, found := known.SeedOf(key)
		// The known cache only ever holds an answer at least as new as
		// the one the seeds stand for: reseeding from it is idempotent
		// when it is the same, and takes a newer one sent at the same
		// instant.
		if found && (k == nil || kn.Sent >= k.seedSent) {
			k = l.seed(key, k, &kn, t)
		}
		if end := kn.BlockEnd(); found && end > 0 && k != nil {
			// A block Redis reported holds here too.
			k.block = max(k.block, end)
		}
		if k != nil {
			times, costs = k.times, k.costs
		}
		for j := p.WinStart[i]; j < p.WinStart[i+1]; j++ {
			used, reset, wait := windowState(p, i, p.Wins[j], times, costs, t)
			ok = ok && wait == 0
			res[3*j], res[3*j+1], res[3*j+2] = used, reset, wait
		}
		if p.BlockOf(i) > 0 && k != nil && k.block > t {
			ok = false
			codec.BlockedFor(p, res, bleft, i, k.block-t)
		}
	}
	if !ok {
		if allow && p.Blocked > 0 {
			l.startBlocks(p, res, bleft, t)
		}
		return codec.StatusDenied
	}
	if allow {
		l.record(p, id, t)
	}
	return codec.StatusAdmitted
}

// windowState returns what window w of key i of p holds at t, given the
// key's entries (times and costs, oldest first), as the script replies:
// used, the time to its reset and, when a request of the key's cost does
// not fit, the wait until it does (0 when it fits).
func windowState(p *plan.Plan, i int, w plan.Window, times, costs []int64, t int64) (used, reset, wait int64) {
	// Entries after t (the clock went back) count, as in the script.
	// Grains are treated as exact.
	from, end := t-w.Period+1, int64(0)
	if p.IsCal(i) {
		from, end = p.CalSpan(i, t) // the period, not a span of time
	}
	lo, _ := slices.BinarySearch(times, from)
	for _, c := range costs[lo:] {
		used += c
	}
	cost := p.Cost[i]
	if used > 0 {
		reset = times[lo] + w.Period - t
		if used+cost > w.Limit {
			// The request fits once the oldest entries whose costs make
			// up the excess have left.
			left := used + cost - w.Limit
			e := lo
			for ; e < len(costs)-1 && left > costs[e]; e++ {
				left -= costs[e]
			}
			wait = times[e] + w.Period - t
		}
	}
	if end > 0 {
		reset = end - t
		if wait > 0 {
			wait = end - t
		}
	}
	return used, reset, wait
}

// record counts the admitted request id of plan p at t in every key,
// trimming what no window of the key reaches any more.
func (l *Limiter) record(p *plan.Plan, id, t int64) {
	for i, key := range p.Keys {
		k := l.add(key, t)
		k.ret = max(k.ret, p.Longest(i))
		drop, _ := slices.BinarySearch(k.times, t-k.ret+1)
		if drop > 0 {
			k.times, k.ids, k.costs = k.times[drop:], k.ids[drop:], k.costs[drop:]
			if cap(k.times) > 2*len(k.times)+16 {
				k.times, k.ids, k.costs = slices.Clone(k.times), slices.Clone(k.ids), slices.Clone(k.costs)
			}
		}
		at, _ := slices.BinarySearch(k.times, t+1)
		k.times = slices.Insert(k.times, at, t)
		k.ids = slices.Insert(k.ids, at, id)
		k.costs = slices.Insert(k.costs, at, p.Cost[i])
	}
}

// startBlocks starts the block of every key of p (a denied allow, whose
// outcome is res and bleft) that has a block, is not blocked yet and had no
// room in a window, as the script does. Called with l.mu held.
func (l *Limiter) startBlocks(p *plan.Plan, res, bleft []int64, t int64) {
	for i, key := range p.Keys {
		b := p.BlockOf(i)
		if b == 0 || bleft[i] > 0 {
			continue
		}
		full := false
		for j := p.WinStart[i]; j < p.WinStart[i+1]; j++ {
			full = full || res[3*j+2] > 0
		}
		if full {
			l.add(key, t).block = t + b
			codec.BlockedFor(p, res, bleft, i, b)
		}
	}
}

// add returns key's entry, creating it (and making room) if needed.
func (l *Limiter) add(key string, t int64) *localKey {
	k := l.keys[key]
	if k == nil {
		if len(l.keys) >= l.maxKeys {
			l.evict(t)
		}
		k = &localKey{}
		l.keys[strings.Clone(key)] = k
	}
	return k
}

// seed makes key (whose entry is k, or nil) start from kn, what Redis last
// said about it: the counts Redis reported (in units for a key with a
// cost) are entered as if admitted at the time the answer arrived, so none
// leaves a window earlier than the real entries it stands for (those were
// admitted before the answer). With windows W1 > W2 > ... of counts
// u1 >= u2 >= ..., an entry of u_n goes at that time and one of
// u_i - u_(i+1) just outside window i+1, at the time minus W_(i+1):
// counted in window i and the longer ones, not in the shorter ones. A
// subject that was full stays denied until its entries would have left;
// one with k of L used gets at most L-k more. The counts are entered
// whole, even above the answer's limit: a limit function or a rule
// override may check the next request against a higher limit, which must
// still see every entry (capped at a limit of 2, an answer of 4 used gave
// a request of limit 5 three more instead of one). Seeds of an older
// answer are replaced; entries this limiter admitted itself stay (Redis
// never saw them). Called with l.mu held.
func (l *Limiter) seed(key string, k *localKey, kn *denials.Key, t int64) *localKey {
	if k == nil {
		k = l.add(key, t)
	} else {
		keep := 0
		for i, id := range k.ids {
			if id != seedID {
				k.times[keep], k.ids[keep], k.costs[keep] = k.times[i], k.ids[i], k.costs[i]
				keep++
			}
		}
		k.times, k.ids, k.costs = k.times[:keep], k.ids[:keep], k.costs[:keep]
	}
	k.seed, k.seedSent = kn.Wall, kn.Sent
	ws := slices.Clone(kn.Wins)
	slices.SortFunc(ws, func(a, b denials.Win) int { return int(b.Period - a.Period) })
	for i, w := range ws {
		k.ret = max(k.ret, w.Period)
		at, n := kn.Wall, w.Used
		if i+1 < len(ws) {
			at -= ws[i+1].Period
			n -= ws[i+1].Used
		}
		if n <= 0 {
			continue
		}
		// One entry carrying the n units: a byte quota's gigabytes
		// take no more memory than a count.
		pos, _ := slices.BinarySearch(k.times, at+1)
		k.times = slices.Insert(k.times, pos, at)
		k.ids = slices.Insert(k.ids, pos, seedID)
		k.costs = slices.Insert(k.costs, pos, n)
	}
	return k
}

// Finish does the work of fin (see Finish) for request id, as the script
// does in Redis: a removal deletes its entry, a settlement changes its
// cost, never below zero, a debt at the request's own time, once.
func (l *Limiter) Finish(id int64, fin []codec.Undo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range fin {
		k := l.keys[u.Key]
		if k == nil {
			continue
		}
		j := slices.Index(k.ids, id)
		switch {
		case j < 0:
		case u.Mode == 's' || u.Mode == 'g':
			k.costs[j] = max(0, k.costs[j]+u.Delta)
			k.ids[j] = settledID // settled once
		default:
			k.times, k.ids, k.costs = slices.Delete(k.times, j, j+1), slices.Delete(k.ids, j, j+1), slices.Delete(k.costs, j, j+1)
		}
	}
}

// settledID marks a local entry that was settled.
const settledID = -2

// evict makes room for one key: expired keys first, then arbitrary ones
// (map order is random) down to 90% of the cap.
func (l *Limiter) evict(t int64) {
	for key, k := range l.keys {
		if k.expired(t) {
			delete(l.keys, key)
		}
	}
	for key := range l.keys {
		if len(l.keys) < l.maxKeys*9/10+1 && len(l.keys) < l.maxKeys {
			break
		}
		delete(l.keys, key)
	}
}

// Forget drops key.
func (l *Limiter) Forget(key string) {
	l.mu.Lock()
	delete(l.keys, key)
	l.mu.Unlock()
}

// MaxKeys returns the most keys l holds.
func (l *Limiter) MaxKeys() int { return l.maxKeys }
