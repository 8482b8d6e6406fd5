package engine

import (
	"unsafe"

	"github.com/slidelimit/slidelimit/engine/internal/admission"
)

// take records what c, admitted by src, took; req is its Request.
func (c *call) take(req *Request, src source) *admission.Record {
	p := &c.plan
	t := admission.New(p, c.id, src == fromLocal, c.sec*1e6+c.usec, func(i int) int64 { return c.suffixOf(i, src) })
	for i := range req.Checks {
		t.Checks = append(t.Checks, admission.Check{Key: p.KeyOf[i], Priced: req.Checks[i].Rule.Cost != ""})
	}
	return t
}

// suffixOf returns the suffix of c's member in key i. The local limiter
// uses none; in Redis every key of one script call got the same one, which
// on a cluster may differ between calls (c.suffix is then -1).
func (c *call) suffixOf(i int, src source) int64 {
	switch {
	case src == fromLocal:
		return 0
	case c.suffix >= 0:
		return c.suffix
	}
	for j := range c.parts {
		for _, k := range c.part(j) {
			if int(k) == i {
				return c.parts[j].suf
			}
		}
	}
	return -1
}

// stringBytes returns the bytes of s without copying; they must not be
// changed.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
