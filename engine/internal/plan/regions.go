package plan

// Share is where a region stands among the regions that keep one limit
// together: its index among them ordered by name, and their number. The
// zero Share (Regions 0) is a limiter without regions.
type Share struct {
	Index, Regions int64
}

// Full reports whether a window of limit limit holding used entries is
// full for region s whatever its unacknowledged admissions U: used >
// limit - R + r. With U = 0 the share floor((limit - used + r) / R) is
// then 0, and a larger U never leaves more room (U + 1 grows faster than
// the share), so only an entry leaving the window (or a removal) makes
// room. The zero Share is never full.
func (s Share) Full(used, limit int64) bool {
	return s.Regions > 0 && used > limit-s.Regions+s.Index
}

// Near reports whether a window of limit limit holding used entries is
// near enough its limit for region s that the share rule counts its
// copies there, and may deny: R·used > limit - R + r (below, the rule
// always has room; see lua/mw_regions.lua).
func (s Share) Near(used, limit int64) bool {
	return s.Regions > 0 && s.Regions*used > limit-s.Regions+s.Index
}

// regions is the part of a Plan for regions: per key whether it holds
// copies of this region's unacknowledged admissions (see Regions in
// lua/multi_window.lua), and their number.
type regions struct {
	Unstable  []bool
	NUnstable int
	Share     Share
	// ShareLeft is, after a decision, the most time (µs) until a
	// key's share has room again; 0 when every one had room.
	ShareLeft int64
	// ShareRoom is, after a decision, per key what its share leaves after
	// the admission, where the script counted the key's copies and every
	// window had room; -2 - left where the share rule denied the key
	// (left µs until its share has room, at most MaxShareWait); -1
	// elsewhere.
	ShareRoom []int64
}

// resetRegions empties p's regions part.
func (p *Plan) resetRegions() {
	if p.NUnstable > 0 || len(p.Unstable) > 0 {
		p.Unstable, p.NUnstable = p.Unstable[:0], 0
		p.ShareRoom = p.ShareRoom[:0]
	}
	p.Share, p.ShareLeft = Share{}, 0
}

// ShareKeys makes every count key of p keep copies of this region's
// unacknowledged admissions, for the share rule of region s. It reports with an *Error a key the share rule does
// not cover: a weighted key (a cost or a grain), a calendar key or a
// distinct key. Slot keys (in-flight windows) stay local.
func (p *Plan) ShareKeys(s Share) error {
	for k := range p.Keys {
		switch {
		case p.Slot[k]:
			continue
		case p.Weighted[k], p.IsCal(k), p.IsDistinct(k):
			return &Error{Check: p.checkOf(k), Window: -1, Reason: "a cost, a grain, a calendar window or a distinct value is not shared across regions (make the group regions:local)"}
		}
	}
	p.Share = s
	for k := range p.Keys {
		on := !p.Slot[k]
		p.Unstable = append(p.Unstable, on)
		p.ShareRoom = append(p.ShareRoom, -1)
		if on {
			p.NUnstable++
		}
	}
	return nil
}

// ShareWait records the reply of key k's 'U' fields (see
// lua/multi_window.lua, Regions): left µs until its share has room,
// capped at MaxShareWait (a share denial is not a full window, and an
// acknowledgement, not a departure from the window, mostly makes room),
// or, when negative, -1 - the room its share leaves.
func (p *Plan) ShareWait(k int, left int64) {
	if left < 0 {
		p.ShareRoom[k] = -1 - left
		return
	}
	left = min(left, MaxShareWait)
	p.ShareLeft = max(p.ShareLeft, left)
	if left > 0 {
		p.ShareRoom[k] = -2 - left
	}
}

// ShareHeld reports, after a decision that the share rule denied in key
// k, how long (µs) the denial may be held in the cache of denials: the
// time until the key's share has room, at most ShareHold.
func (p *Plan) ShareHeld(k int) (int64, bool) {
	if !p.HasUnstable(k) || p.ShareRoom[k] > -2 {
		return 0, false
	}
	return min(-2-p.ShareRoom[k], ShareHold), true
}

// ShareHold caps how long the cache of denials holds a denial by a
// region's share that an acknowledgement may lift (µs): a request of the
// same key then asks Redis again. An acknowledgement waits that long at
// most to be used; a hot subject at its share makes about one Redis call
// per ShareHold and process, not one per request.
const ShareHold = 10_000

// MaxShareWait caps the wait of a denial by a region's share (µs): about
// a round trip between regions plus a batch.
const MaxShareWait = 250_000

// HasUnstable reports whether key k holds copies (see Regions).
func (p *Plan) HasUnstable(k int) bool { return p.NUnstable > 0 && p.Unstable[k] }

// checkOf returns the first check counted in key k, or -1.
func (p *Plan) checkOf(k int) int {
	for i, key := range p.KeyOf {
		if int(key) == k {
			return i
		}
	}
	return -1
}
