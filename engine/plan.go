package engine

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/slidelimit/slidelimit/internal/access"
	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/rules"
)

// Request limits, so that one request cannot make a script call unbounded.
const (
	// maxChecks is the largest number of checks in a Request: the rule
	// language's [rulelimits.MaxLimiters], so that a group that parses never
	// makes a request the engine refuses.
	maxChecks = rulelimits.MaxLimiters
	// maxWindows is the largest number of windows in a Request, over all
	// its checks: the rule language's [rulelimits.MaxWindows].
	maxWindows = rulelimits.MaxWindows
	// maxCountLimit is the largest limit the engine accepts for a window of
	// a count key: a limiter without a cost whose windows are all exact,
	// which stores one entry per admitted request. It is the engine's bound
	// on the windows that rule text caps at 100,000: the rule language
	// keeps Redis memory per subject small, while the engine
	// also serves windows built in Go (such as 1,000,000 a minute) and
	// refuses only limits whose sorted sets no server could hold. Windows of weighted keys (a cost or a grain) accept up to
	// 2^50, as in rule text.
	maxCountLimit = 1_000_000_000
)

// A taken key keeps its check's index in an int8 (taken.go): a maxChecks
// above 128 must not compile.
const _ int8 = maxChecks - 1

// window is a merged window in the engine's units.
type window struct {
	period int64 // microseconds
	limit  int64
	grain  int64 // µs; 0 for exact. In a weighted key, the effective grain (see nestGrains)
}

// plan is a Request resolved to Redis keys: checks that map to the same
// key are merged (one key must never receive the same member twice),
// windows are in microseconds. Its slices are reused between requests.
type plan struct {
	buf    []byte   // every key, back to back
	ends   []int    // end of key i in buf
	keyOf  []int32  // per check: index in keys, -1 for a check without windows
	keys   []string // unique keys, views of buf: valid until the next build (clone to keep one)
	args   []keyArg // keys as command arguments
	kstart []int32  // windows of key i are wins[kstart[i]:kstart[i+1]]
	wins   []window
	origin []int32 // per window of the request, in check then window order: index in wins
	kcost  []int64 // per key: what the request counts in it (1 in count keys)
	kw     []bool  // per key: weighted (entries carry running totals, see lua/multi_window.lua)

	// Blocks (Check.Block): per key, the block in µs (0: none), and for
	// keys with one the block key as an argument (see blockKey). nblock
	// counts the keys with a block; without any, the slices stay empty.
	kblock []int64
	bbuf   []byte
	bargs  []keyArg
	nblock int

	ks     []bool  // per key: a slot key (in-flight window), whose one window's period is the lease
	slotOf []int32 // per check: index in keys of its slot key, -1 for none
	slots  int     // number of slot keys

	// Calendar windows (see calendar.go): per key, what a calendar key
	// needs (unit 0 for other keys); the calendar windows
	// of the checks; the request's zone. Without calendar windows, the
	// slices stay empty.
	kcals []calKey
	calw  []calRef
	zone  *time.Location

	// Distinct values (see distinct.go): per key, the member of the value
	// it counts (empty: the request's id), their bytes, the number of such
	// keys, and per window whether it held the value before the decision.
	kd    []string
	dbuf  []byte
	nd    int
	held  []bool
	dprev []int64 // per key: what a rollback restores (see readHeld)
	dat   []int64 // per key: the time the script decided at
}

func periodMicros(d time.Duration) int64 {
	// Round up: a shorter window would admit more than asked for.
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

func (p *plan) build(k *keyer, req *Request) error {
	p.reset()
	p.zone = req.Zone
	if err := checkRequest(req); err != nil {
		return err
	}
	total := 0
	for i := range req.Checks {
		total += len(req.Checks[i].Windows)
		if total > maxWindows {
			return &requestError{Check: i, Window: -1, Reason: "more than " + strconv.Itoa(maxWindows) + " windows in the request"}
		}
		if err := p.addCheck(k, req, i); err != nil {
			return err
		}
	}
	if len(p.ends) == 0 {
		return nil
	}
	p.viewKeys()
	if p.nblock > 0 {
		p.blockKeys()
	}
	p.sizeCalendars()
	for key := range p.keys {
		p.mergeWindows(k, req, key)
	}
	p.kstart = append(p.kstart, int32(len(p.wins)))
	p.mapOrigins(req)
	return nil
}

// reset empties p for another request, keeping its buffers.
func (p *plan) reset() {
	p.buf, p.ends, p.keyOf = p.buf[:0], p.ends[:0], p.keyOf[:0]
	p.keys, p.kstart, p.wins, p.origin = p.keys[:0], p.kstart[:0], p.wins[:0], p.origin[:0]
	p.kcost, p.kw, p.ks, p.slotOf, p.slots = p.kcost[:0], p.kw[:0], p.ks[:0], p.slotOf[:0], 0
	clear(p.args) // drop the previous request's key string
	p.args = p.args[:0]
	if p.nblock > 0 || len(p.kblock) > 0 {
		p.kblock, p.bbuf, p.nblock = p.kblock[:0], p.bbuf[:0], 0
		clear(p.bargs)
		p.bargs = p.bargs[:0]
	}
	if p.nd > 0 || len(p.kd) > 0 {
		p.kd, p.dbuf, p.nd, p.held, p.dprev, p.dat = p.kd[:0], p.dbuf[:0], 0, p.held[:0], p.dprev[:0], p.dat[:0]
	}
	if len(p.kcals) > 0 || len(p.calw) > 0 {
		p.kcals, p.calw = p.kcals[:0], p.calw[:0]
	}
}

// checkRequest checks what of req does not depend on its checks.
func checkRequest(req *Request) error {
	switch req.Fail {
	case rules.FailDefault, rules.FailOpen, rules.FailClosed, rules.FailLocal:
	default:
		return &requestError{Check: -1, Window: -1, Reason: "unknown fail mode " + string(req.Fail)}
	}
	if len(req.Checks) > maxChecks {
		return &requestError{Check: -1, Window: -1, Reason: "more than " + strconv.Itoa(maxChecks) + " checks"}
	}
	return nil
}

// addCheck checks check i of req and records its keys: its slot key if it
// has an in-flight window, its rate key if it has rate windows.
func (p *plan) addCheck(k *keyer, req *Request, i int) error {
	c := &req.Checks[i]
	if c.Hashed && !access.IsStoredHash(c.Subject) {
		return &requestError{Check: i, Window: -1, Reason: "a Hashed check's subject is not a stored hash"}
	}
	kc := keyCost(&c.Limiter)
	cost, err := checkCost(i, c, kc)
	if err != nil {
		return err
	}
	rate, conc, err := validWindows(i, c, kc, cost)
	if err != nil {
		return err
	}
	slot := int32(-1)
	if conc >= 0 {
		// The slot key of the subject: its count key's name and hash
		// tag (whatever the limiter's grains) and a suffix.
		start := len(p.buf)
		p.buf = append(k.appendKeyOf(p.buf, req.Scope, c.Kind, c.Name, "", c.Subject, c.Hashed), slotSuffix...)
		slot = p.key(start, 1, false, true)
	}
	p.slotOf = append(p.slotOf, slot)
	idx := int32(-1)
	if rate > 0 {
		if idx, err = p.rateKey(k, req, i, kc, cost, rate); err != nil {
			return err
		}
	}
	p.keyOf = append(p.keyOf, idx)
	// The calendar keys last: they extend the rate key's name, and the
	// script adds to a calendar counter at once when the keys before it
	// have room (less to take back).
	if slots := min(conc+1, 1); rate+slots < len(c.Windows) {
		return p.calendars(k, req, i, kc, cost, idx)
	}
	return nil
}

// rateKey registers the rate key of check i, with its block and distinct
// value, and returns its index; kc is its key cost, cost what the check
// counts and rate its number of rate windows.
func (p *plan) rateKey(k *keyer, req *Request, i int, kc string, cost int64, rate int) (int32, error) {
	c := &req.Checks[i]
	start := len(p.buf)
	p.buf = k.appendKeyOf(p.buf, req.Scope, c.Kind, c.Name, kc, c.Subject, c.Hashed)
	idx := p.key(start, cost, kc != "", false)
	if p.kcost[idx] != cost {
		return -1, &requestError{Check: i, Window: -1, Reason: "checks sharing a key (same scope, limiter and subject) count different costs"}
	}
	if c.Block != 0 {
		if err := p.block(i, int(idx), c.Block); err != nil {
			return -1, err
		}
	}
	if c.Distinct != "" {
		if kc != "" || rate > maxDistinctWindows {
			return -1, &requestError{Check: i, Window: -1, Reason: "a distinct value counts in a limiter without a cost or a grain, with at most 30 windows"}
		}
		if err := p.distinct(k, i, idx, c.Distinct); err != nil {
			return -1, err
		}
	}
	return idx, nil
}

// keyBytes returns the name of key i, in p.buf.
func (p *plan) keyBytes(i int32) []byte {
	start := 0
	if i > 0 {
		start = p.ends[i-1]
	}
	return p.buf[start:p.ends[i]]
}

// validWindows checks the windows of check i, c, whose key cost is kc and
// which counts cost, and returns its number of rate windows and the index
// of its in-flight window (-1 for none).
func validWindows(i int, c *Check, kc string, cost int64) (rate, conc int, err error) {
	maxLimit := int64(maxCountLimit)
	if kc != "" {
		maxLimit = rulelimits.MaxBoundedLimit
	}
	rate, conc = len(c.Windows), -1
	for j := range c.Windows {
		w := &c.Windows[j] // a pointer: a Window is 48 bytes
		if w.Calendar != "" {
			if err := validCalendar(i, j, w, cost); err != nil {
				return 0, 0, err
			}
			rate--
			continue
		}
		if w.Concurrent {
			// Several in-flight windows of one check (groups sharing a
			// scope, merged by Limiter.Peek) share its slot key: the
			// smallest limit holds, as for equal periods.
			switch {
			case c.Limiter.Cost != "" || c.Cost > 1:
				return 0, 0, &requestError{Check: i, Window: j, Reason: "in-flight window in a check with a cost: slots count requests, not units"}
			case w.Limit < 1 || w.Limit > maxCountLimit:
				return 0, 0, &requestError{Check: i, Window: j, Reason: "limit outside 1..1000000000"}
			case w.Period != 0 || w.Grain != 0:
				return 0, 0, &requestError{Check: i, Window: j, Reason: "in-flight window with a period or a grain"}
			}
			conc, rate = j, rate-1
			continue
		}
		switch {
		case w.Limit < 1 || w.Limit > maxLimit:
			if kc == "" {
				return 0, 0, &requestError{Check: i, Window: j, Reason: "limit outside 1..1000000000"}
			}
			return 0, 0, &requestError{Check: i, Window: j, Reason: "limit outside 1..2^50"}
		case w.Period < time.Microsecond || w.Period > rulelimits.MaxPeriod:
			return 0, 0, &requestError{Check: i, Window: j, Reason: "period outside 1µs..720h"}
		case w.Grain < 0 || w.Grain > 0 && (w.Grain < time.Microsecond || w.Grain >= w.Period):
			return 0, 0, &requestError{Check: i, Window: j, Reason: "grain outside 1µs..period"}
		case cost > w.Limit:
			return 0, 0, &requestError{Check: i, Window: j, Reason: "cost " + strconv.FormatInt(cost, 10) +
				" is above the window's limit " + strconv.FormatInt(w.Limit, 10) + ": the request can never be admitted"}
		}
	}
	return rate, conc, nil
}

// viewKeys makes p.keys views of p.buf. The next request reuses p.buf:
// who keeps a key beyond the call (the caches' map keys, undo records)
// clones it. This saves an allocation per decision.
func (p *plan) viewKeys() {
	s := unsafe.String(unsafe.SliceData(p.buf), len(p.buf))
	prev := 0
	for _, end := range p.ends {
		p.keys = append(p.keys, s[prev:end])
		prev = end
	}
}

// keyArgs makes p.args, the keys as command arguments, once a script call
// needs them (a cached denial does not).
func (p *plan) keyArgs() {
	for _, k := range p.keys[len(p.args):] {
		p.args = append(p.args, keyArg{b: stringBytes(k), s: k})
	}
}

// mergeWindows records the windows of key: the union over its checks, the
// smaller limit where periods are equal, longest first.
func (p *plan) mergeWindows(k *keyer, req *Request, key int) {
	first := int32(len(p.wins))
	p.kstart = append(p.kstart, first)
	if p.isCal(key) {
		p.calWindows(req, int32(key))
		return
	}
	for i := range req.Checks {
		if p.ks[key] {
			if p.slotOf[i] == int32(key) {
				p.mergeSlot(first, k.lease, req.Checks[i].Windows)
			}
			continue
		}
		if p.keyOf[i] == int32(key) {
			p.mergeRate(first, req.Checks[i].Windows)
		}
	}
	// Longest first: the script derives shorter windows from longer
	// ones where it can, and takes the first as the key's longest.
	slices.SortFunc(p.wins[first:], func(a, b window) int { return cmp.Compare(b.period, a.period) })
	if p.kw[key] {
		nestGrains(p.wins[first:])
	}
}

// mergeRate merges the rate windows of ws into the windows of the key
// whose windows start at first.
func (p *plan) mergeRate(first int32, ws []rules.Window) {
merge:
	for j := range ws {
		w := &ws[j]
		if w.Concurrent || w.Calendar != "" {
			continue
		}
		// A grain is rounded down to whole µs: a finer grain only
		// makes the window more exact.
		mw := window{period: periodMicros(w.Period), limit: w.Limit, grain: int64(w.Grain / time.Microsecond)}
		for m := first; m < int32(len(p.wins)); m++ {
			if p.wins[m].period == mw.period {
				p.wins[m].limit = min(p.wins[m].limit, mw.limit)
				p.wins[m].grain = minGrain(p.wins[m].grain, mw.grain)
				continue merge
			}
		}
		p.wins = append(p.wins, mw)
	}
}

// mapOrigins maps every window of req, in check then window order, to its
// merged window.
func (p *plan) mapOrigins(req *Request) {
	for i := range req.Checks {
		key := p.keyOf[i]
		if key < 0 && p.slotOf[i] < 0 && len(p.calw) == 0 {
			continue
		}
		ws := req.Checks[i].Windows
		for j := range ws {
			if ws[j].Calendar != "" {
				p.origin = append(p.origin, p.calOrigin(i, j))
				continue
			}
			if ws[j].Concurrent {
				p.origin = append(p.origin, p.kstart[p.slotOf[i]])
				continue
			}
			per := periodMicros(ws[j].Period)
			for m := p.kstart[key]; m < p.kstart[key+1]; m++ {
				if p.wins[m].period == per {
					p.origin = append(p.origin, m)
					break
				}
			}
		}
	}
}

// block records check i's block d on key idx: the longest block of the
// checks sharing the key.
func (p *plan) block(i, idx int, d time.Duration) error {
	if d < 0 || d > rulelimits.MaxPeriod {
		return &requestError{Check: i, Window: -1, Reason: "block outside 0..720h"}
	}
	for len(p.kblock) <= idx {
		p.kblock = append(p.kblock, 0)
	}
	ms := (periodMicros(d) + 999) / 1000 * 1000 // whole ms: the block key's PX
	if p.kblock[idx] == 0 {
		p.nblock++
	}
	p.kblock[idx] = max(p.kblock[idx], ms)
	return nil
}

// blockSuffix ends a block key: the limiter key it guards, then this
// suffix, which keeps it in the key's hash tag (its cluster slot) and
// apart from every limiter key (those end with '}' or a cost, in which ':'
// is escaped).
const blockSuffix = ":block"

// blockKey returns the key of key's block (see Check.Block).
func blockKey(key string) string { return key + blockSuffix }

// blockKeys builds the block keys of the keys with a block, once every key
// is known.
func (p *plan) blockKeys() {
	for len(p.kblock) < len(p.keys) {
		p.kblock = append(p.kblock, 0)
	}
	for i, key := range p.keys {
		if p.kblock[i] > 0 {
			p.bbuf = append(p.bbuf, key...)
			p.bbuf = append(p.bbuf, blockSuffix...)
		}
	}
	s := unsafe.String(unsafe.SliceData(p.bbuf), len(p.bbuf))
	end := 0
	for i, key := range p.keys {
		var a keyArg
		if p.kblock[i] > 0 {
			start := end
			end += len(key) + len(blockSuffix)
			a = keyArg{b: p.bbuf[start:end:end], s: s[start:end]}
		}
		p.bargs = append(p.bargs, a)
	}
}

// blockOf returns key i's block in µs, 0 for none.
func (p *plan) blockOf(i int) int64 {
	if p.nblock == 0 || i >= len(p.kblock) {
		return 0
	}
	return p.kblock[i]
}

// nargs returns the number of script KEYS of keys (indices into p.keys):
// one per key, and one more per block key.
func (p *plan) nargs(keys []int32) int {
	n := len(keys)
	if p.nblock > 0 {
		for _, k := range keys {
			if p.blockOf(int(k)) > 0 {
				n++
			}
		}
	}
	return n
}

// appendKeyArgs appends the script's KEYS for key k of p: the key, then
// its block key if it has a block.
func (p *plan) appendKeyArgs(args []any, k int) []any {
	if len(p.args) < len(p.keys) {
		p.keyArgs()
	}
	args = append(args, &p.args[k])
	if p.blockOf(k) > 0 {
		args = append(args, &p.bargs[k])
	}
	return args
}

// slotSuffix ends the name of a slot key: after the hash tag, so that a
// subject's slots live in the slot of its count key.
const slotSuffix = ":slots"

// key records the key appended to p.buf at start, or finds an equal one
// recorded before (and drops the copy), and returns its index. A new key
// counts cost, and is weighted or a slot key as told.
func (p *plan) key(start int, cost int64, weighted, slot bool) int32 {
	idx := int32(len(p.ends))
	prev := 0
	for j, end := range p.ends {
		if bytes.Equal(p.buf[prev:end], p.buf[start:]) {
			p.buf = p.buf[:start]
			return int32(j)
		}
		prev = end
	}
	p.ends = append(p.ends, len(p.buf))
	p.kcost = append(p.kcost, cost)
	p.kw = append(p.kw, weighted)
	p.ks = append(p.ks, slot)
	if slot {
		p.slots++
	}
	return idx
}

// mergeSlot merges the in-flight window among ws into the one window of
// the slot key whose windows start at first: the smaller limit, and the
// lease (µs) as its period, which is how long the slot lives unrenewed.
func (p *plan) mergeSlot(first int32, lease int64, ws []rules.Window) {
	for _, w := range ws {
		if !w.Concurrent {
			continue
		}
		if int(first) == len(p.wins) {
			p.wins = append(p.wins, window{period: lease, limit: w.Limit})
		} else {
			p.wins[first].limit = min(p.wins[first].limit, w.Limit)
		}
	}
}

// keyCost returns the cost segment of l's key: l.Cost for a limiter with a
// cost, "1" for a limiter without one but with a grained window (its key is
// weighted, like that of a cost of 1), "" for a count key.
func keyCost(l *rules.Limiter) string {
	if l.Cost != "" {
		return l.Cost
	}
	for _, w := range l.Windows {
		if w.Grain != 0 {
			return "1"
		}
	}
	return ""
}

// checkCost returns what check i counts: c.Cost, or when it is 0 the
// limiter's constant cost, or 1.
func checkCost(i int, c *Check, kc string) (int64, error) {
	switch {
	case c.Cost < 0:
		return 0, &requestError{Check: i, Window: -1, Reason: "negative cost " + strconv.FormatInt(c.Cost, 10)}
	case c.Cost > 1 && kc == "":
		return 0, &requestError{Check: i, Window: -1, Reason: "cost " + strconv.FormatInt(c.Cost, 10) +
			" above 1 needs a limiter with a cost (Limiter.Cost), which names its own key"}
	case c.Cost > 0:
		return c.Cost, nil
	}
	if c.Limiter.Cost == "" {
		return 1, nil
	}
	if n, err := strconv.ParseInt(c.Limiter.Cost, 10, 64); err == nil {
		if n < 1 {
			return 0, &requestError{Check: i, Window: -1, Reason: "constant cost " + c.Limiter.Cost + " below 1"}
		}
		return n, nil
	}
	return 1, nil
}

// minGrain returns the finer of two grains, 0 (exact) being the finest.
func minGrain(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	return min(a, b)
}

// nestGrains replaces the grains of a weighted key's windows (longest
// first) by the grains the script merges entries with. An entry older than
// every window shorter than W_j but inside W_j (tier j) may be merged with
// its neighbours of the same grain of tier j; that grain must be no coarser
// than the grain of any window the entry is still in (W_j and the longer
// ones: the minimum, 0 when one is exact), and a multiple of the grain of
// tier j-1, so that an entry merged in tier j-1 lies within one grain of
// tier j (the grids nest, all starting at time 0). An entry then always
// stands for requests within one grain of every window it is in, which
// bounds how early a window may deny.
func nestGrains(ws []window) {
	g := int64(-1) // running minimum from the longest window
	for i := range ws {
		if g < 0 {
			g = ws[i].grain
		} else {
			g = minGrain(g, ws[i].grain)
		}
		ws[i].grain = g
	}
	prev := int64(0)
	for i := len(ws) - 1; i >= 0; i-- {
		if prev > 0 {
			ws[i].grain = ws[i].grain / prev * prev
		}
		prev = ws[i].grain
	}
}

// longest returns the longest period of key i.
func (p *plan) longest(i int) int64 { return p.wins[p.kstart[i]].period }

// keyArg is a key as a command argument. A pointer to it fits in an
// interface without allocating, unlike a string, and go-redis writes it
// with MarshalBinary and prints it (in traces and errors) with String.
type keyArg struct {
	b []byte
	s string
}

// MarshalBinary returns the key's bytes.
func (k *keyArg) MarshalBinary() ([]byte, error) { return k.b, nil }

// String returns the key.
func (k *keyArg) String() string { return k.s }

// maxRawSubject is the longest subject stored as is; longer ones are
// hashed so that keys stay short.
const maxRawSubject = 128

// escaped marks the bytes percent-encoded in keys (see the package
// documentation for the key format): the separators, the braces, the escape
// and hash markers, and space and control bytes, which keep keys readable
// in redis-cli.
var escaped = func() (t [256]bool) {
	for c := range 0x21 {
		t[c] = true
	}
	for _, c := range "%{}|:#\x7f" {
		t[c] = true
	}
	return t
}()

const hexDigits = "0123456789ABCDEF"

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escaped[c] {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return b
}

// keyer builds Redis keys. It is safe for concurrent use.
type keyer struct {
	lease   int64 // the slot lease in µs (WithLease), the period of a slot key's window
	prefix  string
	hashAll bool
	macs    *sync.Pool // of hash.Hash (HMAC-SHA-256); nil without a secret
}

func newKeyer(c *config) *keyer {
	k := &keyer{prefix: c.prefix, hashAll: c.hashAll, lease: periodMicros(c.lease)}
	if c.hashAll && len(c.secret) > 0 {
		secret := c.secret
		k.macs = &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}
	}
	return k
}

// appendKey appends the key of (scope, limiter, subject) to b. cost is the
// limiter's key cost (see keyCost): "" for a count key, whose name is its
// hash tag of three segments; a weighted key has a fourth, the cost, after
// the hash tag.
func (k *keyer) appendKey(b []byte, scope string, kind rules.Kind, name, cost, subject string) []byte {
	return k.appendKeyOf(b, scope, kind, name, cost, subject, false)
}

// appendKeyOf is appendKey; hashed says that subject is already a stored
// hash (Check.Hashed), written as is.
func (k *keyer) appendKeyOf(b []byte, scope string, kind rules.Kind, name, cost, subject string, hashed bool) []byte {
	b = append(b, k.prefix...)
	b = append(b, '{')
	b = appendEscaped(b, scope)
	b = append(b, '|')
	b = appendEscaped(b, string(kind))
	if name != "" {
		b = append(b, ':')
		b = appendEscaped(b, name)
	}
	b = append(b, '|')
	switch {
	case hashed:
		b = append(b, subject...)
	case k.hashAll || len(subject) > maxRawSubject:
		b = k.appendHashed(b, subject)
	default:
		b = appendEscaped(b, subject)
	}
	b = append(b, '}')
	if cost != "" {
		// After the hash tag: every key of a subject (its count, slot and
		// cost keys) lives in one cluster slot, so that one script call
		// decides or finishes a request of a subject.
		b = append(b, '|')
		b = appendEscaped(b, cost)
	}
	return b
}

// storedHashLen is the length of a stored hash: "#" and the base64url of
// a SHA-256.
const storedHashLen = 1 + 43

// storedHash returns the stored hash in the key of check i (see
// appendKey), a view of p.buf valid until the next build, or "" when the
// check's subject is stored as is or has no rate or slot key: the
// denial hook is given a hashed subject's hash from its key rather than
// hashing it again.
func (p *plan) storedHash(k *keyer, i int) string {
	if i >= len(p.keyOf) || i >= len(p.slotOf) {
		return "" // the build stopped before check i
	}
	ki := p.keyOf[i]
	if ki < 0 {
		ki = p.slotOf[i]
	}
	if ki < 0 || int(ki) >= len(p.keys) {
		return ""
	}
	// The subject ends the hash tag, and nothing before it holds a '}'
	// (the scope and the limiter's name are escaped).
	key := p.keys[ki]
	if len(key) < len(k.prefix) {
		return ""
	}
	end := strings.IndexByte(key[len(k.prefix):], '}')
	if end < storedHashLen+1 {
		return ""
	}
	end += len(k.prefix)
	// '#' is escaped in a subject stored as is.
	if h := key[end-storedHashLen : end]; h[0] == '#' && key[end-storedHashLen-1] == '|' {
		return h
	}
	return ""
}

func (k *keyer) appendHashed(b []byte, subject string) []byte {
	var sum [sha256.Size]byte
	if k.macs != nil {
		h := k.macs.Get().(hash.Hash)
		h.Reset()
		h.Write([]byte(subject))
		h.Sum(sum[:0])
		k.macs.Put(h)
	} else {
		sum = sha256.Sum256([]byte(subject))
	}
	b = append(b, '#')
	return base64.RawURLEncoding.AppendEncode(b, sum[:])
}
