package tally

import (
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

const (
	// defaultTimeout is the deadline of a write when the Store sets
	// none: engine.WithTimeout's default.
	defaultTimeout = 100 * time.Millisecond
	// DefaultFlush is how often the denial tallies are written to Redis.
	DefaultFlush = time.Second
	// MinFlush and MaxFlush bound the period of the writes.
	MinFlush = 10 * time.Millisecond
	MaxFlush = 10 * time.Second

	// bucketTop is the number of (scope, rule, subject) entries a tally
	// bucket keeps in Redis: the most denied ones; the others are dropped
	// at every write.
	bucketTop = 256
	// maxPending is the number of entries the process gathers between two
	// writes; beyond it, a new entry replaces the least denied one, whose
	// count is dropped.
	maxPending = shards * shardCap
	// keep is how long the tallies cover: the longest view TopDenied
	// answers.
	keep = time.Hour

	shards   = 16
	shardCap = 64
	maxNames = 4096 // hashed subjects whose value (or start) the process remembers

	fineBucket   = 10 * time.Second // the buckets of views up to fineSpan
	fineSpan     = 5 * time.Minute
	coarseBucket = time.Minute // the buckets of longer views
)

// Denials is how many times a subject was denied by one rule of one
// scope, fleet-wide, in the period asked of TopDenied.
type Denials struct {
	// Scope is the request's scope (a route pattern or a scope: name).
	Scope string
	// Rule is the rule's ID (rules.Rule.ID): "ip", "user",
	// "header(X-Api-Key)", "user[bytes]".
	Rule string
	// Subject is the check's subject as the engine was given it
	// (engine.Check.Subject). For a subject stored hashed
	// (engine.WithHashedSubjects, or longer than 128 bytes) it is, when
	// this process denied it lately, the subject, or only its first bytes
	// for one longer than 128 bytes (Truncated: the process never keeps a
	// long subject whole); otherwise it is the stored hash ("#" and
	// base64url), with Hashed set.
	Subject string
	// Hashed reports that Subject is the stored hash, not the subject.
	Hashed bool
	// Truncated reports that Subject is the first bytes (at most 48, cut
	// at a UTF-8 character) of a subject longer than 128 bytes.
	Truncated bool
	// Hash is the stored hash of a subject stored hashed, "" for one
	// stored as is: what engine.Check.Hashed and a reset take
	// to peek at or reset the subject without its value.
	Hash string
	// Denied is the number of denials counted in the period.
	Denied int64
}

// Stats reports what the tallies lost since they were created.
type Stats struct {
	// Overflow is the number of denials dropped in process because more
	// than 1,024 entries were denied between two writes.
	Overflow int64
	// Failed is the number of denials dropped because their write to
	// Redis failed.
	Failed int64
}

// key is what one denial counts for: an engine.Denial, whose subject is
// the stored subject (as is, or its stored hash when hashed). Its strings
// may be views of the request's until owned.
type key struct {
	scope   string
	kind    rules.Kind
	name    string
	cost    string
	subject string
	shown   string
	hashed  bool
	cut     bool
}

// owned returns k with copies of its subject strings, which may be views
// of a request's (a long subject's start, a key buffer): an entry kept
// past the denial must not pin them.
func (k key) owned() key {
	k.subject = strings.Clone(k.subject)
	k.shown = strings.Clone(k.shown)
	return k
}

// shownName is what the process remembers of a hashed subject it denied.
type shownName struct {
	shown string
	cut   bool
}

// shard gathers denials between two writes: at most shardCap entries, the
// least denied one making room for a new one.
type shard struct {
	mu     sync.Mutex
	idx    map[key]int
	keys   []key
	counts []int64
	last   int      // the index of the entry counted last
	_      [56]byte // a shard per 128 bytes: no two on one cache line pair
}

// hotTally counts, without a lock, the denials of one subject denied again
// and again (a flood): see Tallies.hot.
type hotTally struct {
	key key
	// n counts the denials since the last write, in stripes (see add) so
	// that the cores do not fight over one line; closedTally once a write
	// read it for the last time (it was replaced), after which a denial
	// that still found it counts in a shard instead.
	n [hotStripes]struct {
		atomic.Int64
		_ [120]byte // one per cache line pair (adjacent-line prefetch)
	}
}

// hotStripes is the number of counters of a hotTally.
const hotStripes = 16

// add counts c denials in a stripe and reports whether h was still open.
// The stripe is the calling goroutine's (from its stack's address): a
// goroutine stays on one core for many denials, so each core mostly adds
// to lines it already holds, where a random stripe would move a line
// between the cores at every other denial.
func (h *hotTally) add(c int64) bool {
	var here byte
	s := uintptr(unsafe.Pointer(&here)) >> 12
	return h.n[(s^s>>6)%hotStripes].Add(c) > 0
}

// read returns the denials counted since the last read and sets the
// counters to to: 0, or closedTally for the last read.
func (h *hotTally) read(to int64) int64 {
	var c int64
	for i := range h.n {
		c += h.n[i].Swap(to)
	}
	return c
}

// closedTally marks a hotTally read for the last time: adding to it stays
// negative.
const closedTally = math.MinInt64

// Tallies are the denial tallies of one engine's Redis and prefix. Note
// is safe for concurrent use.
type Tallies struct {
	// hot is the subject a shard saw denied twice in a row last, promoted
	// at most once per write: its denials skip the shards' locks. The next
	// write reads the ones it replaced for the last time.
	hot      atomic.Pointer[hotTally]
	promoted atomic.Bool // a subject was promoted since the last write
	hotMu    sync.Mutex  // guards retired
	retired  []*hotTally
	shards   [shards]shard
	overflow atomic.Int64
	failed   atomic.Int64
	failing  atomic.Bool // the last write failed

	namesMu sync.Mutex
	names   map[string]shownName // stored hash -> what to show of the subject

	store Store
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

// Store is what the tallies write to and read from Redis with: the
// engine's client, key prefix and logger, the deadline of a write, the
// clock, and whether the engine considers its server down (then the
// tallies neither write nor read, as decisions do not ask it).
type Store struct {
	Client  interface{ Pipeline() redis.Pipeliner }
	Prefix  string
	Timeout time.Duration
	Log     *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Down is engine.Engine.Down; nil is never down.
	Down func() bool
}

// New returns the tallies that write to and read from store. They count
// what Note is given and write nothing until Start.
func New(store Store) *Tallies {
	if store.Now == nil {
		store.Now = time.Now
	}
	if store.Down == nil {
		store.Down = func() bool { return false }
	}
	if store.Log == nil {
		store.Log = slog.Default()
	}
	if store.Timeout <= 0 {
		store.Timeout = defaultTimeout
	}
	t := &Tallies{names: map[string]shownName{}, store: store}
	for i := range t.shards {
		t.shards[i].idx = make(map[key]int, shardCap)
	}
	return t
}

// Note counts d, a denial reported by the engine's hook.
func (t *Tallies) Note(d engine.Denial) {
	k := key{scope: d.Scope, kind: d.Kind, name: d.Name, cost: d.Cost, subject: d.Subject, shown: d.Shown, hashed: d.Hashed, cut: d.Cut}
	if h := t.hot.Load(); h != nil && h.key == k && h.add(1) {
		return
	}
	// A random shard, not one per subject: the denials of one hot subject
	// by many goroutines then spread over the shards' locks. The write
	// merges the entries of one subject in several shards.
	s := &t.shards[rand.Uint32()%shards]
	s.mu.Lock()
	// The last entry counted first: under a flood, most denials are of
	// the same few subjects, and comparing strings costs less than
	// hashing them.
	if i := s.last; i < len(s.keys) && s.keys[i] == k {
		s.counts[i]++
		k = s.keys[i] // owned
		s.mu.Unlock()
		t.promote(k)
		return
	}
	if i, ok := s.idx[k]; ok {
		s.counts[i]++
		s.last = i
		s.mu.Unlock()
		return
	}
	k = k.owned()
	if len(s.keys) < shardCap {
		s.idx[k] = len(s.keys)
		s.keys = append(s.keys, k)
		s.counts = append(s.counts, 1)
		s.mu.Unlock()
		return
	}
	// Full: the least denied entry makes room (its count is lost), so
	// that a subject denied again and again keeps its place in a flood
	// of subjects denied once.
	m := 0
	for i, n := range s.counts {
		if n < s.counts[m] {
			m = i
		}
	}
	lost := s.counts[m]
	if h := t.hot.Load(); h != nil && h.key == s.keys[m] && h.add(lost) {
		// The hot subject's few denials counted here before it was
		// promoted go with the rest of its denials.
		lost = 0
	}
	delete(s.idx, s.keys[m])
	s.keys[m], s.counts[m] = k, 1
	s.idx[k] = m
	s.mu.Unlock()
	t.overflow.Add(lost)
}

// promote makes k the hot subject, unless one was promoted since the last
// write.
func (t *Tallies) promote(k key) {
	if t.promoted.Load() || !t.promoted.CompareAndSwap(false, true) {
		return
	}
	t.hotMu.Lock()
	if old := t.hot.Swap(&hotTally{key: k}); old != nil {
		t.retired = append(t.retired, old)
	}
	t.hotMu.Unlock()
}

// takeHot adds the hot subject's denials, and those of the ones it
// replaced, to keys and counts (at indexes them).
func (t *Tallies) takeHot(at map[key]int, keys []key, counts []int64) ([]key, []int64) {
	t.hotMu.Lock()
	retired, cur := t.retired, t.hot.Load()
	t.retired = nil
	t.hotMu.Unlock()
	t.promoted.Store(false)
	add := func(k key, c int64) {
		if c <= 0 {
			return
		}
		if n, ok := at[k]; ok {
			counts[n] += c
			return
		}
		at[k] = len(keys)
		keys = append(keys, k)
		counts = append(counts, c)
	}
	for _, h := range retired {
		add(h.key, h.read(closedTally))
	}
	if cur != nil {
		add(cur.key, cur.read(0))
	}
	return keys, counts
}

// take empties the shards into a list of distinct entries and their
// counts.
func (t *Tallies) take(keys []key, counts []int64) ([]key, []int64) {
	at := make(map[key]int, len(keys))
	keys, counts = t.takeHot(at, keys, counts)
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for j, k := range s.keys {
			if n, ok := at[k]; ok {
				counts[n] += s.counts[j]
				continue
			}
			at[k] = len(keys)
			keys = append(keys, k)
			counts = append(counts, s.counts[j])
		}
		clear(s.keys) // drop the entries' strings
		s.keys, s.counts = s.keys[:0], s.counts[:0]
		clear(s.idx)
		s.mu.Unlock()
	}
	return keys, counts
}

// Stats returns the denials the tallies dropped so far.
func (t *Tallies) Stats() Stats {
	return Stats{Overflow: t.overflow.Load(), Failed: t.failed.Load()}
}
