package slidelimit

import (
	"time"
)

// heldAtMost notes d, the WithMaxUpstreamBlock of a Transport of t: a
// block another process reports is held at most the largest.
func (t *Throttle) heldAtMost(d time.Duration) {
	for {
		cur := t.blockCap.Load()
		if int64(d) <= cur || t.blockCap.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// maxHeld is the longest block t holds a lane for on the word of another
// process or of Redis.
func (t *Throttle) maxHeld() time.Duration {
	if c := t.blockCap.Load(); c > 0 {
		return time.Duration(c)
	}
	return DefaultMaxUpstreamBlock
}

// heard holds ln for ms, as another process or Redis said, but at most
// maxHeld; ln.mu is held. It reports whether ms was longer: the block's
// key was then written by a process with a longer cap, or by a version
// without one.
func (ln *lane) heard(ms int64) bool {
	d := ln.t.maxHeld()
	over := ms > d.Milliseconds()
	if !over {
		d = time.Duration(ms) * time.Millisecond
	}
	ln.holdUntil(time.Now().Add(d))
	return over
}

// shorten rewrites the block of ln in Redis, found longer than maxHeld,
// to maxHeld: without it, each renewal would read the long block again
// and hold the lane anew.
func (f *fleet) shorten(ln *lane) {
	f.run(ln, "b", 0, f.t.maxHeld().Milliseconds())
}
