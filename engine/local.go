package engine

import (
	"slices"
	"strings"
	"sync"
)

// localLimiter is the in-process fallback of rules.FailLocal: the same
// keys, windows and semantics as the script, in memory, counting only this
// process's requests. It is safe for concurrent use (one mutex: it only
// runs while Redis fails).
//
// Memory is bounded: at most maxKeys keys, each holding the admission
// times within its retention, which the windows' limits bound (a key never
// holds more entries within its longest window than that window's limit).
// A key whose entries have all left its retention is dropped when next
// seen or when the key cap is reached; if every key is still live at the
// cap, arbitrary keys are dropped, forgetting their counts.
type localLimiter struct {
	mu      sync.Mutex
	keys    map[string]*localKey
	maxKeys int
}

type localKey struct {
	times []int64 // admission times in µs, ascending
	ids   []int64 // the request id of each time, for GiveBack
	ret   int64   // retention in µs: the longest window seen
}

// expired reports whether every entry of k has left its retention at t.
func (k *localKey) expired(t int64) bool {
	return len(k.times) == 0 || k.times[len(k.times)-1] <= t-k.ret
}

func newLocalLimiter(maxKeys int) *localLimiter {
	return &localLimiter{keys: make(map[string]*localKey), maxKeys: maxKeys}
}

// decide fills c's outcome at time t (µs) like the script: every window
// is read, and only when all have room (and c is an allow) is t added to
// every key.
func (l *localLimiter) decide(c *call, t int64) {
	c.sec, c.usec = t/1e6, t%1e6
	p := &c.plan
	l.mu.Lock()
	defer l.mu.Unlock()
	ok := true
	for i, key := range p.keys {
		var times []int64
		if k := l.keys[key]; k != nil {
			if k.expired(t) {
				delete(l.keys, key)
			} else {
				times = k.times
			}
		}
		for j := p.kstart[i]; j < p.kstart[i+1]; j++ {
			w := p.wins[j]
			// Entries after t (the clock went back) count, as in the
			// script.
			lo, _ := slices.BinarySearch(times, t-w.period+1)
			used := int64(len(times) - lo)
			var reset, wait int64
			if used > 0 {
				reset = times[lo] + w.period - t
				if used >= w.limit {
					ok = false
					wait = times[lo+int(used-w.limit)] + w.period - t
				}
			}
			c.res[3*j], c.res[3*j+1], c.res[3*j+2] = used, reset, wait
		}
	}
	c.status = statusDenied
	if !ok {
		return
	}
	c.status = statusAdmitted
	if c.mode != opAllow {
		return
	}
	for i, key := range p.keys {
		k := l.keys[key]
		if k == nil {
			if len(l.keys) >= l.maxKeys {
				l.evict(t)
			}
			k = &localKey{}
			l.keys[strings.Clone(key)] = k
		}
		k.ret = max(k.ret, p.longest(i))
		drop, _ := slices.BinarySearch(k.times, t-k.ret+1)
		if drop > 0 {
			k.times, k.ids = k.times[drop:], k.ids[drop:]
			if cap(k.times) > 2*len(k.times)+16 {
				k.times, k.ids = slices.Clone(k.times), slices.Clone(k.ids)
			}
		}
		at, _ := slices.BinarySearch(k.times, t+1)
		k.times = slices.Insert(k.times, at, t)
		k.ids = slices.Insert(k.ids, at, c.id)
	}
}

// giveBack removes the entries of request id from the keys of p.
func (l *localLimiter) giveBack(p *plan, id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, key := range p.keys {
		k := l.keys[key]
		if k == nil {
			continue
		}
		if i := slices.Index(k.ids, id); i >= 0 {
			k.times, k.ids = slices.Delete(k.times, i, i+1), slices.Delete(k.ids, i, i+1)
		}
	}
}

// evict makes room for one key: expired keys first, then arbitrary ones
// (map order is random) down to 90% of the cap.
func (l *localLimiter) evict(t int64) {
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

// forget drops key.
func (l *localLimiter) forget(key string) {
	l.mu.Lock()
	delete(l.keys, key)
	l.mu.Unlock()
}
