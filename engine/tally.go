package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/access"
	"github.com/slidelimit/slidelimit/rules"
)

// Denial tallies: every denial of Allow (from Redis, from the cache of
// denials, or from the fallback limiter) adds one to its (scope, limiter,
// subject) in process; a background goroutine writes what was added to
// Redis about once a second, in one pipeline, so that every process's
// denials add up in the same keys and a request pays no round trip for
// them. See the package documentation, Denial tallies.
const (
	// defaultTallyFlush is how often the denial tallies are written to
	// Redis (withTallyFlush).
	defaultTallyFlush = time.Second
	// tallyTop is the number of (scope, limiter, subject) entries a tally
	// bucket keeps in Redis: the most denied ones; the others are dropped
	// at every write.
	tallyTop = 256
	// tallyPending is the number of entries the process gathers between
	// two writes; beyond it, a new entry replaces the least denied one,
	// whose count is dropped.
	tallyPending = tallyShards * tallyShardCap
	// tallyKeep is how long the tallies cover: the longest view topDenied
	// answers.
	tallyKeep = time.Hour

	tallyShards   = 16
	tallyShardCap = 64
	tallyNames    = 4096 // hashed subjects whose value (or start) the process remembers
	// tallyPreview is how much of a subject longer than maxRawSubject
	// the tallies keep to show it: its first bytes, never the whole.
	tallyPreview = 48

	fineBucket   = 10 * time.Second // the buckets of views up to fineSpan
	fineSpan     = 5 * time.Minute
	coarseBucket = time.Minute // the buckets of longer views
)

// withTallies turns the denial tallies on or off (on by default). Off,
// denials are not counted and topDenied reports nothing new. The
// benchmarks and the replay reach it through internal/access.
func withTallies(on bool) Option {
	return func(c *config) error {
		c.tallyOff = !on
		return nil
	}
}

// withTallyFlush sets how often the denial tallies are written to Redis
// (default defaultTallyFlush); it must be between 10 ms and 10 s.
func withTallyFlush(d time.Duration) Option {
	return func(c *config) error {
		if d < 10*time.Millisecond || d > 10*time.Second {
			return &optionError{Option: "withTallyFlush", Reason: "the period must be between 10ms and 10s"}
		}
		c.tallyFlush = d
		return nil
	}
}

// tallyStats reports what the tallies lost, since the engine started.
type tallyStats struct {
	// Overflow is the number of denials dropped in process because more
	// than tallyPending entries were denied between two writes.
	Overflow int64
	// Failed is the number of denials dropped because their write to
	// Redis failed.
	Failed int64
}

// tallyKey is what one denial counts for. subject is the stored subject:
// the check's subject when stored as is (at most maxRawSubject bytes), or
// its stored hash (hashed), made once, at denial time, so that no pending
// entry holds a long subject and a write only sends. shown is then what
// topDenied may show of a hashed subject: the subject when short, its
// first tallyPreview bytes when long (cut), "" when unknown (a check
// given by its hash). Its strings may be views of the request's until
// owned.
type tallyKey struct {
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
func (k tallyKey) owned() tallyKey {
	k.subject = strings.Clone(k.subject)
	k.shown = strings.Clone(k.shown)
	return k
}

// tallyName is what the process remembers of a hashed subject it denied.
type tallyName struct {
	shown string
	cut   bool
}

// preview returns the first tallyPreview bytes of s, cut at the start of
// a UTF-8 character.
func preview(s string) string {
	n := min(len(s), tallyPreview)
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// tallyShard gathers denials between two writes: at most tallyShardCap
// entries, the least denied one making room for a new one.
type tallyShard struct {
	mu     sync.Mutex
	idx    map[tallyKey]int
	keys   []tallyKey
	counts []int64
	last   int      // the index of the entry counted last
	_      [56]byte // a shard per 128 bytes: no two on one cache line pair
}

// hotTally counts, without a lock, the denials of one subject denied again
// and again (a flood): see tallies.hot.
type hotTally struct {
	key tallyKey
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

// tallies is an engine's denial tallies. note is safe for concurrent use.
type tallies struct {
	// hot is the subject a shard saw denied twice in a row last, promoted
	// at most once per write: its denials skip the shards' locks. The next
	// write reads the ones it replaced for the last time.
	hot      atomic.Pointer[hotTally]
	promoted atomic.Bool // a subject was promoted since the last write
	hotMu    sync.Mutex  // guards retired
	retired  []*hotTally
	shards   [tallyShards]tallyShard
	overflow atomic.Int64
	failed   atomic.Int64
	failing  atomic.Bool // the last write failed

	namesMu sync.Mutex
	names   map[string]tallyName // stored hash -> what to show of the subject
}

func newTallies() *tallies {
	t := &tallies{names: map[string]tallyName{}}
	for i := range t.shards {
		t.shards[i].idx = make(map[tallyKey]int, tallyShardCap)
	}
	return t
}

// noteDenial counts d, a denial of req by Allow, in the tallies.
func (e *Engine) noteDenial(req *Request, d *Decision) {
	e.noteDenialOf(req, d, nil)
}

// noteDenialOf is noteDenial with the plan of the decision, whose keys
// hold the stored hash of a hashed subject; without a plan (nil), the
// subject is hashed here.
func (e *Engine) noteDenialOf(req *Request, d *Decision, p *plan) {
	t := e.tally
	if t == nil || d.Allowed || d.Denied.Window.Limit == 0 || d.Denied.Check >= len(req.Checks) {
		return // allowed, or denied by no window (fail-closed)
	}
	c := &req.Checks[d.Denied.Check]
	k := tallyKey{scope: req.Scope, kind: c.Kind, name: c.Name, cost: c.Limiter.Cost, subject: c.Subject}
	switch {
	case c.Hashed:
		k.hashed = true
	case e.keyer.hashAll || len(c.Subject) > maxRawSubject:
		k.hashed, k.shown = true, c.Subject
		if len(c.Subject) > maxRawSubject {
			k.shown, k.cut = preview(c.Subject), true
		}
		k.subject = ""
		if p != nil {
			k.subject = p.storedHash(e.keyer, d.Denied.Check)
		}
		if k.subject == "" {
			k.subject = string(e.keyer.appendHashed(nil, c.Subject))
		}
	}
	if h := t.hot.Load(); h != nil && h.key == k && h.add(1) {
		return
	}
	// A random shard, not one per subject: the denials of one hot subject
	// by many goroutines then spread over the shards' locks. The write
	// merges the entries of one subject in several shards.
	s := &t.shards[rand.Uint32()%tallyShards]
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
	if len(s.keys) < tallyShardCap {
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
func (t *tallies) promote(k tallyKey) {
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
func (t *tallies) takeHot(at map[tallyKey]int, keys []tallyKey, counts []int64) ([]tallyKey, []int64) {
	t.hotMu.Lock()
	retired, cur := t.retired, t.hot.Load()
	t.retired = nil
	t.hotMu.Unlock()
	t.promoted.Store(false)
	add := func(k tallyKey, c int64) {
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
func (t *tallies) take(keys []tallyKey, counts []int64) ([]tallyKey, []int64) {
	at := make(map[tallyKey]int, len(keys))
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

// startTallies runs the goroutine that writes the tallies every period,
// and once more when the engine closes.
func (e *Engine) startTallies(every time.Duration) {
	e.bg.start(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		var keys []tallyKey
		var counts []int64
		for {
			select {
			case <-e.stop:
				keys, counts = e.tally.take(keys[:0], counts[:0])
				e.flushTallies(keys, counts)
				return
			case <-tick.C:
				keys, counts = e.tally.take(keys[:0], counts[:0])
				e.flushTallies(keys, counts)
			}
		}
	})
}

// tallyKeys returns the fine and coarse bucket keys at time now.
func (e *Engine) tallyKey(b []byte, span time.Duration, at time.Time) []byte {
	b = append(b, e.keyer.prefix...)
	b = append(b, "{tally}:"...)
	if span == fineBucket {
		b = append(b, "10s:"...)
	} else {
		b = append(b, "1m:"...)
	}
	return strconv.AppendInt(b, at.UnixNano()/int64(span), 10)
}

// flushTallies writes one period's entries to the current buckets in one
// pipeline: ZINCRBY each, then trim each bucket to its tallyTop most
// denied entries and set its expiry. A failed write is dropped (and
// counted); the first failure after a success is logged, and so is the
// success that ends a run of failures.
func (e *Engine) flushTallies(keys []tallyKey, counts []int64) {
	if len(keys) == 0 {
		return
	}
	defer clear(keys) // drop the entries' strings
	var total int64
	for _, n := range counts {
		total += n
	}
	if e.group == groupAll && e.doms.one.down.Load() {
		// Known down (see health.go): no dial, no wait, as for decisions.
		e.tallyFailed(total, ErrUnavailable)
		return
	}
	e.tally.remember(keys)
	now := e.now()
	fine := string(e.tallyKey(nil, fineBucket, now))
	coarse := string(e.tallyKey(nil, coarseBucket, now))
	members := make([]string, len(keys))
	var member []byte
	for i, k := range keys {
		member = tallyMember(member[:0], k)
		members[i] = string(member)
	}
	// The deadline covers the Redis call only: what comes before takes
	// time that grows with the entries, never with their subjects' size.
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	pipe := e.client.Pipeline()
	for i, m := range members {
		pipe.ZIncrBy(ctx, fine, float64(counts[i]), m)
		pipe.ZIncrBy(ctx, coarse, float64(counts[i]), m)
	}
	for _, key := range []string{fine, coarse} {
		pipe.ZRemRangeByRank(ctx, key, 0, -tallyTop-1)
	}
	pipe.PExpire(ctx, fine, fineSpan+2*fineBucket)
	pipe.PExpire(ctx, coarse, tallyKeep+2*coarseBucket)
	_, err := pipe.Exec(ctx)
	if err != nil {
		e.tallyFailed(total, err)
		return
	}
	if e.tally.failing.Swap(false) {
		e.log.Info("engine: denial tallies are written again", "dropped", e.tally.failed.Load())
	}
}

// tallyFailed counts n denials whose write failed with err, and logs the
// first failure after a success.
func (e *Engine) tallyFailed(n int64, err error) {
	failed := e.tally.failed.Add(n)
	if !e.tally.failing.Swap(true) {
		e.log.Warn("engine: denial tallies cannot be written to Redis; dropping them until it answers",
			"error", err, "dropped", failed)
	}
}

// tallyMember appends the member of k in a bucket: the escaped scope,
// limiter ID and subject, separated by '|' (which escaping removes from
// each). A subject the keys store hashed is stored hashed here too (its
// '#' marks it: escaping removes it from subjects stored as is).
func tallyMember(b []byte, k tallyKey) []byte {
	b = appendEscaped(b, k.scope)
	b = append(b, '|')
	b = appendEscaped(b, rules.Limiter{Kind: k.kind, Name: k.name, Cost: k.cost}.ID())
	b = append(b, '|')
	if k.hashed {
		return append(b, k.subject...)
	}
	return appendEscaped(b, k.subject)
}

// remember records what to show of the hashed subjects of keys, for
// topDenied: at most tallyNames of them, each at most maxRawSubject bytes.
func (t *tallies) remember(keys []tallyKey) {
	t.namesMu.Lock()
	defer t.namesMu.Unlock()
	for _, k := range keys {
		if !k.hashed || k.shown == "" {
			continue
		}
		if _, ok := t.names[k.subject]; !ok && len(t.names) >= tallyNames {
			clear(t.names) // forget the oldest by forgetting all: bounded, and rare
		}
		t.names[k.subject] = tallyName{shown: k.shown, cut: k.cut}
	}
}

// tallyStats returns the denials the tallies dropped so far.
func (e *Engine) tallyStats() tallyStats {
	if e.tally == nil {
		return tallyStats{}
	}
	return tallyStats{Overflow: e.tally.overflow.Load(), Failed: e.tally.failed.Load()}
}

// topDenied returns the n (scope, limiter, subject) entries denied most in
// the last since, fleet-wide, most denied first (then by scope, limiter and
// subject). since must be between 1 s and tallyKeep; it is rounded up to
// whole buckets of 10 s (up to 5 min) or 1 min (beyond), and the bucket in
// progress is included, so a 1 min view covers 60 to 70 s. access.Denials of the
// last period of withTallyFlush are not written yet. n <= 0 returns every
// entry kept. It reads Redis with one pipeline; it fails with an
// error matching ErrInvalid for a bad since and ErrBackend when Redis does,
// at once (wrapping ErrUnavailable) while the engine considers a single
// server down.
func (e *Engine) topDenied(ctx context.Context, since time.Duration, n int) ([]access.Denials, error) {
	if since < time.Second || since > tallyKeep {
		return nil, fmt.Errorf("%w: tally period %s is not between 1s and %s", ErrInvalid, since, tallyKeep)
	}
	if e.group == groupAll && e.doms.one.down.Load() {
		// Known down (see health.go): through the pool, each operator
		// page view would wait for its deadline and go-redis would log
		// a failed dial per retry of the pipeline.
		return nil, &BackendError{Op: "tally", Err: ErrUnavailable}
	}
	span := coarseBucket
	if since <= fineSpan {
		span = fineBucket
	}
	buckets := int((since + span - 1) / span)
	now := e.now()
	ctx, cancel := context.WithTimeout(ctx, max(e.timeout, time.Second))
	defer cancel()
	pipe := e.client.Pipeline()
	cmds := make([]*redis.ZSliceCmd, 0, buckets+1)
	for i := 0; i <= buckets; i++ {
		key := string(e.tallyKey(nil, span, now.Add(-time.Duration(i)*span)))
		cmds = append(cmds, pipe.ZRangeWithScores(ctx, key, 0, -1))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, &BackendError{Op: "tally", Err: err}
	}
	sums := map[string]int64{}
	for _, c := range cmds {
		for _, z := range c.Val() {
			if m, ok := z.Member.(string); ok {
				sums[m] += int64(z.Score)
			}
		}
	}
	out := make([]access.Denials, 0, len(sums))
	for m, sum := range sums {
		if d, ok := e.parseTallyMember(m); ok && sum > 0 {
			d.Denied = sum
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b access.Denials) int {
		if a.Denied != b.Denied {
			if a.Denied > b.Denied {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Scope+"\x00"+a.Limiter+"\x00"+a.Subject, b.Scope+"\x00"+b.Limiter+"\x00"+b.Subject)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// parseTallyMember reads a member written by tallyMember.
func (e *Engine) parseTallyMember(m string) (access.Denials, bool) {
	parts := strings.Split(m, "|")
	if len(parts) != 3 {
		return access.Denials{}, false
	}
	var d access.Denials
	var ok1, ok2, ok3 bool
	d.Scope, ok1 = unescape(parts[0])
	d.Limiter, ok2 = unescape(parts[1])
	d.Subject, ok3 = unescape(parts[2])
	if !ok1 || !ok2 || !ok3 {
		return access.Denials{}, false
	}
	if strings.HasPrefix(parts[2], "#") { // '#' is escaped in raw subjects
		d.Hashed, d.Hash = true, d.Subject
		if e.tally != nil {
			e.tally.namesMu.Lock()
			n, ok := e.tally.names[parts[2]]
			e.tally.namesMu.Unlock()
			if ok {
				d.Subject, d.Hashed, d.Truncated = n.shown, false, n.cut
			}
		}
	}
	return d, true
}

// unescape reverses appendEscaped.
func unescape(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	return string(b), true
}
