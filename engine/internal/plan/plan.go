package plan

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

	"github.com/slidelimit/slidelimit/internal/keyparts"
	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/rules"
)

// Request limits, so that one request cannot make a script call unbounded.
const (
	// MaxChecks is the largest number of checks in a Request: the rule
	// language's [rulelimits.MaxRules], so that a group that parses never
	// makes a request the engine refuses.
	MaxChecks = rulelimits.MaxRules
	// MaxWindows is the largest number of windows in a Request, over all
	// its checks: the rule language's [rulelimits.MaxWindows].
	MaxWindows = rulelimits.MaxWindows
	// MaxCountLimit is the largest limit the engine accepts for a window of
	// a count key: a rule without a cost whose windows are all exact,
	// which stores one entry per admitted request. It is the engine's bound
	// on the windows that rule text caps at 100,000: the rule language
	// keeps Redis memory per subject small, while the engine
	// also serves windows built in Go (such as 1,000,000 a minute) and
	// refuses only limits whose sorted sets no server could hold. Windows of weighted keys (a cost or a grain) accept up to
	// 2^50, as in rule text.
	MaxCountLimit = 1_000_000_000
)

// Window is a merged window in the engine's units.
type Window struct {
	Period int64 // microseconds
	Limit  int64
	Grain  int64 // µs; 0 for exact. In a weighted key, the effective grain (see nestGrains)
}

// Plan is a Request resolved to Redis keys: checks that map to the same
// key are merged (one key must never receive the same member twice),
// windows are in microseconds. Its slices are reused between requests.
type Plan struct {
	Buf      []byte   // every key, back to back
	Ends     []int    // end of key i in buf
	KeyOf    []int32  // per check: index in keys, -1 for a check without windows
	Keys     []string // unique keys, views of buf: valid until the next build (clone to keep one)
	args     []keyArg // keys as command arguments
	WinStart []int32  // windows of key i are Wins[WinStart[i]:WinStart[i+1]]
	Wins     []Window
	Origin   []int32 // per window of the request, in check then window order: index in wins
	Cost     []int64 // per key: what the request counts in it (1 in count keys)
	Weighted []bool  // per key: weighted (entries carry running totals, see lua/multi_window.lua)

	// Blocks (Check.Block): per key, the block in µs (0: none), and for
	// keys with one the block key as an argument (see BlockKey). Blocked
	// counts the keys with a block; without any, the slices stay empty.
	BlockMicros []int64
	bbuf        []byte
	bargs       []keyArg
	Blocked     int

	Slot   []bool  // per key: a slot key (in-flight window), whose one window's period is the lease
	SlotOf []int32 // per check: index in keys of its slot key, -1 for none
	Slots  int     // number of slot keys

	// Calendar windows (see calendar.go): per key, what a calendar key
	// needs (unit 0 for other keys); the calendar windows
	// of the checks; the request's zone. Without calendar windows, the
	// slices stay empty.
	Cals       []CalKey
	CalWindows []CalRef
	zone       *time.Location

	// Distinct values (see distinct.go): per key, the member of the value
	// it counts (empty: the request's id), their bytes, the number of such
	// keys, and per window whether it held the value before the decision.
	Distinct     []string
	dbuf         []byte
	NDistinct    int
	Held         []bool
	DistinctPrev []int64 // per key: what a rollback restores (see readHeld)
	DistinctAt   []int64 // per key: the time the script decided at

	regions // the count keys with copies (regions.go)
}

func periodMicros(d time.Duration) int64 {
	// Round up: a shorter window would admit more than asked for.
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// Build makes p the plan of req with the keys of k, or reports why req is
// invalid with an *Error. It reuses p's buffers: the previous plan's keys
// become invalid.
func (p *Plan) Build(k *Keyer, req *Request) error {
	p.Reset()
	p.zone = req.Zone
	if err := checkRequest(req); err != nil {
		return err
	}
	total := 0
	for i := range req.Checks {
		total += len(req.Checks[i].Windows)
		if total > MaxWindows {
			return &Error{Check: i, Window: -1, Reason: "more than " + strconv.Itoa(MaxWindows) + " windows in the request"}
		}
		if err := p.addCheck(k, req, i); err != nil {
			return err
		}
	}
	if len(p.Ends) == 0 {
		return nil
	}
	p.viewKeys()
	if p.Blocked > 0 {
		p.blockKeys()
	}
	p.sizeCalendars()
	for key := range p.Keys {
		p.mergeWindows(k, req, key)
	}
	p.WinStart = append(p.WinStart, int32(len(p.Wins)))
	p.mapOrigins(req)
	return nil
}

// Reset empties p for another request, keeping its buffers.
func (p *Plan) Reset() {
	p.Buf, p.Ends, p.KeyOf = p.Buf[:0], p.Ends[:0], p.KeyOf[:0]
	p.Keys, p.WinStart, p.Wins, p.Origin = p.Keys[:0], p.WinStart[:0], p.Wins[:0], p.Origin[:0]
	p.Cost, p.Weighted, p.Slot, p.SlotOf, p.Slots = p.Cost[:0], p.Weighted[:0], p.Slot[:0], p.SlotOf[:0], 0
	clear(p.args) // drop the previous request's key string
	p.args = p.args[:0]
	if p.Blocked > 0 || len(p.BlockMicros) > 0 {
		p.BlockMicros, p.bbuf, p.Blocked = p.BlockMicros[:0], p.bbuf[:0], 0
		clear(p.bargs)
		p.bargs = p.bargs[:0]
	}
	if p.NDistinct > 0 || len(p.Distinct) > 0 {
		p.Distinct, p.dbuf, p.NDistinct, p.Held, p.DistinctPrev, p.DistinctAt = p.Distinct[:0], p.dbuf[:0], 0, p.Held[:0], p.DistinctPrev[:0], p.DistinctAt[:0]
	}
	if len(p.Cals) > 0 || len(p.CalWindows) > 0 {
		p.Cals, p.CalWindows = p.Cals[:0], p.CalWindows[:0]
	}
	p.resetRegions()
}

// checkRequest checks what of req does not depend on its checks.
func checkRequest(req *Request) error {
	switch req.Fail {
	case rules.FailDefault, rules.FailOpen, rules.FailClosed, rules.FailLocal:
	default:
		return &Error{Check: -1, Window: -1, Reason: "unknown fail mode " + string(req.Fail)}
	}
	if len(req.Checks) > MaxChecks {
		return &Error{Check: -1, Window: -1, Reason: "more than " + strconv.Itoa(MaxChecks) + " checks"}
	}
	return nil
}

// addCheck checks check i of req and records its keys: its slot key if it
// has an in-flight window, its rate key if it has rate windows.
func (p *Plan) addCheck(k *Keyer, req *Request, i int) error {
	c := &req.Checks[i]
	if c.Hashed && !keyparts.IsStoredHash(c.Subject) {
		return &Error{Check: i, Window: -1, Reason: "a Hashed check's subject is not a stored hash"}
	}
	kc := KeyCost(&c.Rule)
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
		// tag (whatever the rule's grains) and a suffix.
		start := len(p.Buf)
		p.Buf = append(k.AppendKeyOf(p.Buf, req.Scope, c.Kind, c.Name, "", c.Subject, c.Hashed), SlotSuffix...)
		slot = p.key(start, 1, false, true)
	}
	p.SlotOf = append(p.SlotOf, slot)
	idx := int32(-1)
	if rate > 0 {
		if idx, err = p.rateKey(k, req, i, kc, cost, rate); err != nil {
			return err
		}
	}
	p.KeyOf = append(p.KeyOf, idx)
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
func (p *Plan) rateKey(k *Keyer, req *Request, i int, kc string, cost int64, rate int) (int32, error) {
	c := &req.Checks[i]
	start := len(p.Buf)
	p.Buf = k.AppendKeyOf(p.Buf, req.Scope, c.Kind, c.Name, kc, c.Subject, c.Hashed)
	idx := p.key(start, cost, kc != "", false)
	if p.Cost[idx] != cost {
		return -1, &Error{Check: i, Window: -1, Reason: "checks sharing a key (same scope, limiter and subject) count different costs"}
	}
	if c.Block != 0 {
		if err := p.block(i, int(idx), c.Block); err != nil {
			return -1, err
		}
	}
	if c.Distinct != "" {
		if kc != "" || rate > maxDistinctWindows {
			return -1, &Error{Check: i, Window: -1, Reason: "a distinct value counts in a limiter without a cost or a grain, with at most 30 windows"}
		}
		if err := p.distinct(k, i, idx, c.Distinct); err != nil {
			return -1, err
		}
	}
	return idx, nil
}

// keyBytes returns the name of key i, in p.Buf.
func (p *Plan) keyBytes(i int32) []byte {
	start := 0
	if i > 0 {
		start = p.Ends[i-1]
	}
	return p.Buf[start:p.Ends[i]]
}

// validWindows checks the windows of check i, c, whose key cost is kc and
// which counts cost, and returns its number of rate windows and the index
// of its in-flight window (-1 for none).
func validWindows(i int, c *Check, kc string, cost int64) (rate, conc int, err error) {
	maxLimit := int64(MaxCountLimit)
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
			case c.Rule.Cost != "" || c.Cost > 1:
				return 0, 0, &Error{Check: i, Window: j, Reason: "in-flight window in a check with a cost: slots count requests, not units"}
			case w.Limit < 1 || w.Limit > MaxCountLimit:
				return 0, 0, &Error{Check: i, Window: j, Reason: "limit outside 1..1000000000"}
			case w.Period != 0 || w.Grain != 0:
				return 0, 0, &Error{Check: i, Window: j, Reason: "in-flight window with a period or a grain"}
			}
			conc, rate = j, rate-1
			continue
		}
		switch {
		case w.Limit < 1 || w.Limit > maxLimit:
			if kc == "" {
				return 0, 0, &Error{Check: i, Window: j, Reason: "limit outside 1..1000000000"}
			}
			return 0, 0, &Error{Check: i, Window: j, Reason: "limit outside 1..2^50"}
		case w.Period < time.Microsecond || w.Period > rulelimits.MaxPeriod:
			return 0, 0, &Error{Check: i, Window: j, Reason: "period outside 1µs..720h"}
		case w.Grain < 0 || w.Grain > 0 && (w.Grain < time.Microsecond || w.Grain >= w.Period):
			return 0, 0, &Error{Check: i, Window: j, Reason: "grain outside 1µs..period"}
		case cost > w.Limit:
			return 0, 0, &Error{Check: i, Window: j, Reason: "cost " + strconv.FormatInt(cost, 10) +
				" is above the window's limit " + strconv.FormatInt(w.Limit, 10) + ": the request can never be admitted"}
		}
	}
	return rate, conc, nil
}

// viewKeys makes p.Keys views of p.Buf. The next request reuses p.Buf:
// who keeps a key beyond the call (the caches' map keys, undo records)
// clones it. This saves an allocation per decision.
func (p *Plan) viewKeys() {
	s := unsafe.String(unsafe.SliceData(p.Buf), len(p.Buf))
	prev := 0
	for _, end := range p.Ends {
		p.Keys = append(p.Keys, s[prev:end])
		prev = end
	}
}

// KeyArgs makes p.args, the keys as command arguments, once a script call
// needs them (a cached denial does not).
func (p *Plan) KeyArgs() {
	for _, k := range p.Keys[len(p.args):] {
		p.args = append(p.args, keyArg{b: stringBytes(k), s: k})
	}
}

// mergeWindows records the windows of key: the union over its checks, the
// smaller limit where periods are equal, longest first.
func (p *Plan) mergeWindows(k *Keyer, req *Request, key int) {
	first := int32(len(p.Wins))
	p.WinStart = append(p.WinStart, first)
	if p.IsCal(key) {
		p.calWindows(req, int32(key))
		return
	}
	for i := range req.Checks {
		if p.Slot[key] {
			if p.SlotOf[i] == int32(key) {
				p.mergeSlot(first, k.Lease, req.Checks[i].Windows)
			}
			continue
		}
		if p.KeyOf[i] == int32(key) {
			p.mergeRate(first, req.Checks[i].Windows)
		}
	}
	// Longest first: the script derives shorter windows from longer
	// ones where it can, and takes the first as the key's longest.
	slices.SortFunc(p.Wins[first:], func(a, b Window) int { return cmp.Compare(b.Period, a.Period) })
	if p.Weighted[key] {
		NestGrains(p.Wins[first:])
	}
}

// mergeRate merges the rate windows of ws into the windows of the key
// whose windows start at first.
func (p *Plan) mergeRate(first int32, ws []rules.Window) {
merge:
	for j := range ws {
		w := &ws[j]
		if w.Concurrent || w.Calendar != "" {
			continue
		}
		// A grain is rounded down to whole µs: a finer grain only
		// makes the window more exact.
		mw := Window{Period: periodMicros(w.Period), Limit: w.Limit, Grain: int64(w.Grain / time.Microsecond)}
		for m := first; m < int32(len(p.Wins)); m++ {
			if p.Wins[m].Period == mw.Period {
				p.Wins[m].Limit = min(p.Wins[m].Limit, mw.Limit)
				p.Wins[m].Grain = minGrain(p.Wins[m].Grain, mw.Grain)
				continue merge
			}
		}
		p.Wins = append(p.Wins, mw)
	}
}

// mapOrigins maps every window of req, in check then window order, to its
// merged window.
func (p *Plan) mapOrigins(req *Request) {
	for i := range req.Checks {
		key := p.KeyOf[i]
		if key < 0 && p.SlotOf[i] < 0 && len(p.CalWindows) == 0 {
			continue
		}
		ws := req.Checks[i].Windows
		for j := range ws {
			if ws[j].Calendar != "" {
				p.Origin = append(p.Origin, p.calOrigin(i, j))
				continue
			}
			if ws[j].Concurrent {
				p.Origin = append(p.Origin, p.WinStart[p.SlotOf[i]])
				continue
			}
			per := periodMicros(ws[j].Period)
			for m := p.WinStart[key]; m < p.WinStart[key+1]; m++ {
				if p.Wins[m].Period == per {
					p.Origin = append(p.Origin, m)
					break
				}
			}
		}
	}
}

// block records check i's block d on key idx: the longest block of the
// checks sharing the key.
func (p *Plan) block(i, idx int, d time.Duration) error {
	if d < 0 || d > rulelimits.MaxPeriod {
		return &Error{Check: i, Window: -1, Reason: "block outside 0..720h"}
	}
	for len(p.BlockMicros) <= idx {
		p.BlockMicros = append(p.BlockMicros, 0)
	}
	ms := (periodMicros(d) + 999) / 1000 * 1000 // whole ms: the block key's PX
	if p.BlockMicros[idx] == 0 {
		p.Blocked++
	}
	p.BlockMicros[idx] = max(p.BlockMicros[idx], ms)
	return nil
}

// blockSuffix ends a block key: the rule's key it guards, then this
// suffix, which keeps it in the key's hash tag (its cluster slot) and
// apart from every rule's key (those end with '}' or a cost, in which ':'
// is escaped).
const blockSuffix = ":block"

// BlockKey returns the key of key's block (see Check.Block).
func BlockKey(key string) string { return key + blockSuffix }

// blockKeys builds the block keys of the keys with a block, once every key
// is known.
func (p *Plan) blockKeys() {
	for len(p.BlockMicros) < len(p.Keys) {
		p.BlockMicros = append(p.BlockMicros, 0)
	}
	for i, key := range p.Keys {
		if p.BlockMicros[i] > 0 {
			p.bbuf = append(p.bbuf, key...)
			p.bbuf = append(p.bbuf, blockSuffix...)
		}
	}
	s := unsafe.String(unsafe.SliceData(p.bbuf), len(p.bbuf))
	end := 0
	for i, key := range p.Keys {
		var a keyArg
		if p.BlockMicros[i] > 0 {
			start := end
			end += len(key) + len(blockSuffix)
			a = keyArg{b: p.bbuf[start:end:end], s: s[start:end]}
		}
		p.bargs = append(p.bargs, a)
	}
}

// BlockOf returns key i's block in µs, 0 for none.
func (p *Plan) BlockOf(i int) int64 {
	if p.Blocked == 0 || i >= len(p.BlockMicros) {
		return 0
	}
	return p.BlockMicros[i]
}

// NArgs returns the number of script KEYS of keys (indices into p.Keys):
// one per key, and one more per key with copies (its 'U' fields name it
// again) and per block key.
func (p *Plan) NArgs(keys []int32) int {
	n := len(keys)
	if p.Blocked > 0 {
		for _, k := range keys {
			if p.BlockOf(int(k)) > 0 {
				n++
			}
		}
	}
	if p.NUnstable > 0 {
		for _, k := range keys {
			if p.Unstable[k] {
				n++
			}
		}
	}
	return n
}

// AppendKeyArgs appends the script's KEYS for key k of p: the key, its
// key again when it holds copies (see Regions in lua/multi_window.lua),
// then its block key if it has a block.
func (p *Plan) AppendKeyArgs(args []any, k int) []any {
	if len(p.args) < len(p.Keys) {
		p.KeyArgs()
	}
	args = append(args, &p.args[k])
	if p.HasUnstable(k) {
		args = append(args, &p.args[k]) // its copies are in the key itself
	}
	if p.BlockOf(k) > 0 {
		args = append(args, &p.bargs[k])
	}
	return args
}

// SlotSuffix ends the name of a slot key: after the hash tag, so that a
// subject's slots live in the slot of its count key.
const SlotSuffix = ":slots"

// key records the key appended to p.Buf at start, or finds an equal one
// recorded before (and drops the copy), and returns its index. A new key
// counts cost, and is weighted or a slot key as told.
func (p *Plan) key(start int, cost int64, weighted, slot bool) int32 {
	idx := int32(len(p.Ends))
	prev := 0
	for j, end := range p.Ends {
		if bytes.Equal(p.Buf[prev:end], p.Buf[start:]) {
			p.Buf = p.Buf[:start]
			return int32(j)
		}
		prev = end
	}
	p.Ends = append(p.Ends, len(p.Buf))
	p.Cost = append(p.Cost, cost)
	p.Weighted = append(p.Weighted, weighted)
	p.Slot = append(p.Slot, slot)
	if slot {
		p.Slots++
	}
	return idx
}

// mergeSlot merges the in-flight window among ws into the one window of
// the slot key whose windows start at first: the smaller limit, and the
// lease (µs) as its period, which is how long the slot lives unrenewed.
func (p *Plan) mergeSlot(first int32, lease int64, ws []rules.Window) {
	for _, w := range ws {
		if !w.Concurrent {
			continue
		}
		if int(first) == len(p.Wins) {
			p.Wins = append(p.Wins, Window{Period: lease, Limit: w.Limit})
		} else {
			p.Wins[first].Limit = min(p.Wins[first].Limit, w.Limit)
		}
	}
}

// KeyCost returns the cost segment of l's key: l.Cost for a rule with a
// cost, "1" for a rule without one but with a grained window (its key is
// weighted, like that of a cost of 1), "" for a count key.
func KeyCost(l *rules.Rule) string {
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
// rule's constant cost, or 1.
func checkCost(i int, c *Check, kc string) (int64, error) {
	switch {
	case c.Cost < 0:
		return 0, &Error{Check: i, Window: -1, Reason: "negative cost " + strconv.FormatInt(c.Cost, 10)}
	case c.Cost > 1 && kc == "":
		return 0, &Error{Check: i, Window: -1, Reason: "cost " + strconv.FormatInt(c.Cost, 10) +
			" above 1 needs a rule with a cost (Rule.Cost), which names its own key"}
	case c.Cost > 0:
		return c.Cost, nil
	}
	if c.Rule.Cost == "" {
		return 1, nil
	}
	if n, err := strconv.ParseInt(c.Rule.Cost, 10, 64); err == nil {
		if n < 1 {
			return 0, &Error{Check: i, Window: -1, Reason: "constant cost " + c.Rule.Cost + " below 1"}
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

// NestGrains replaces the grains of a weighted key's windows (longest
// first) by the grains the script merges entries with. An entry older than
// every window shorter than W_j but inside W_j (tier j) may be merged with
// its neighbours of the same grain of tier j; that grain must be no coarser
// than the grain of any window the entry is still in (W_j and the longer
// ones: the minimum, 0 when one is exact), and a multiple of the grain of
// tier j-1, so that an entry merged in tier j-1 lies within one grain of
// tier j (the grids nest, all starting at time 0). An entry then always
// stands for requests within one grain of every window it is in, which
// bounds how early a window may deny.
func NestGrains(ws []Window) {
	g := int64(-1) // running minimum from the longest window
	for i := range ws {
		if g < 0 {
			g = ws[i].Grain
		} else {
			g = minGrain(g, ws[i].Grain)
		}
		ws[i].Grain = g
	}
	prev := int64(0)
	for i := len(ws) - 1; i >= 0; i-- {
		if prev > 0 {
			ws[i].Grain = ws[i].Grain / prev * prev
		}
		prev = ws[i].Grain
	}
}

// Longest returns the Longest period of key i.
func (p *Plan) Longest(i int) int64 { return p.Wins[p.WinStart[i]].Period }

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

// MaxRawSubject is the longest subject stored as is; longer ones are
// hashed so that keys stay short.
const MaxRawSubject = 128

// Keyer builds Redis keys. It is safe for concurrent use.
type Keyer struct {
	Lease   int64 // the slot lease in µs (WithLease), the period of a slot key's window
	prefix  string
	HashAll bool
	macs    *sync.Pool // of hash.Hash (HMAC-SHA-256); nil without a secret
}

// NewKeyer returns a Keyer of keys starting with prefix, whose subjects
// are hashed when hashAll is set (with an HMAC when secret is not empty),
// and whose slots live for lease.
func NewKeyer(prefix string, hashAll bool, secret []byte, lease time.Duration) *Keyer {
	k := &Keyer{prefix: prefix, HashAll: hashAll, Lease: periodMicros(lease)}
	if hashAll && len(secret) > 0 {
		k.macs = &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}
	}
	return k
}

// Prefix returns the prefix of every key.
func (k *Keyer) Prefix() string { return k.prefix }

// AppendKey appends the key of (scope, rule, subject) to b. cost is the
// rule's key cost (see keyCost): "" for a count key, whose name is its
// hash tag of three segments; a weighted key has a fourth, the cost, after
// the hash tag.
func (k *Keyer) AppendKey(b []byte, scope string, kind rules.Kind, name, cost, subject string) []byte {
	return k.AppendKeyOf(b, scope, kind, name, cost, subject, false)
}

// AppendKeyOf is appendKey; hashed says that subject is already a stored
// hash (Check.Hashed), written as is.
func (k *Keyer) AppendKeyOf(b []byte, scope string, kind rules.Kind, name, cost, subject string, hashed bool) []byte {
	b = append(b, k.prefix...)
	b = append(b, '{')
	b = keyparts.AppendEscaped(b, scope)
	b = append(b, '|')
	b = keyparts.AppendEscaped(b, string(kind))
	if name != "" {
		b = append(b, ':')
		b = keyparts.AppendEscaped(b, name)
	}
	b = append(b, '|')
	switch {
	case hashed:
		b = append(b, subject...)
	case k.HashAll || len(subject) > MaxRawSubject:
		b = k.AppendHashed(b, subject)
	default:
		b = keyparts.AppendEscaped(b, subject)
	}
	b = append(b, '}')
	if cost != "" {
		// After the hash tag: every key of a subject (its count, slot and
		// cost keys) lives in one cluster slot, so that one script call
		// decides or finishes a request of a subject.
		b = append(b, '|')
		b = keyparts.AppendEscaped(b, cost)
	}
	return b
}

// storedHashLen is the length of a stored hash: "#" and the base64url of
// a SHA-256.
const storedHashLen = 1 + 43

// StoredHash returns the stored hash in the key of check i (see
// AppendKey), a view of p.Buf valid until the next build, or "" when the
// check's subject is stored as is or has no rate or slot key: the
// denial hook is given a hashed subject's hash from its key rather than
// hashing it again.
func (p *Plan) StoredHash(k *Keyer, i int) string {
	if i >= len(p.KeyOf) || i >= len(p.SlotOf) {
		return "" // the build stopped before check i
	}
	ki := p.KeyOf[i]
	if ki < 0 {
		ki = p.SlotOf[i]
	}
	if ki < 0 || int(ki) >= len(p.Keys) {
		return ""
	}
	// The subject ends the hash tag, and nothing before it holds a '}'
	// (the scope and the rule's name are escaped).
	key := p.Keys[ki]
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

// AppendHashed appends the stored hash of subject to b: "#" and the
// base64url of its SHA-256, or of its HMAC with the engine's secret.
func (k *Keyer) AppendHashed(b []byte, subject string) []byte {
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
