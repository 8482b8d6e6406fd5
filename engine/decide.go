package engine

import (
	"time"
)

// decision builds the Decision of c from its outcome (c.status, c.res and
// the time), which Redis or the fallback limiter filled in.
func (c *call) decision(req *Request, src Source) Decision {
	p := &c.plan
	admitted := c.status == statusAdmitted
	d := Decision{
		Allowed: admitted,
		Source:  src,
		Time:    time.Unix(c.sec, c.usec*1000),
		Windows: make([]WindowState, len(p.origin)),
	}
	counted := admitted && c.mode == opAllow
	var wait int64
	denied := -1
	j := 0
	for i := range req.Checks {
		for _, w := range req.Checks[i].Windows {
			m := p.origin[j]
			mw := p.wins[m]
			used, reset := c.res[3*m], c.res[3*m+1]
			if counted {
				if used == 0 {
					reset = mw.period // the request itself is the oldest
				}
				used += p.kcost[p.keyOf[i]]
			}
			ws := &d.Windows[j]
			ws.Check, ws.Window, ws.Used = i, w, used
			ws.Remaining = max(w.Limit-used, 0)
			ws.Reset = time.Duration(reset) * time.Microsecond
			// A merged window reports the wait for its smallest limit; the
			// check that set that limit is the one that denies.
			if !admitted && w.Limit == mw.limit && c.res[3*m+2] > wait {
				wait, denied = c.res[3*m+2], j
			}
			j++
		}
	}
	if denied >= 0 {
		d.RetryAfter = time.Duration(wait) * time.Microsecond
		d.Denied = d.Windows[denied]
	}
	if counted && (src == FromRedis || src == FromLocal) {
		d.receipt = c.receipt(src)
	}
	return d
}

// receipt names the entries c added. The local limiter uses no suffixes;
// in Redis every key of one script call got the same one, which on a
// cluster may differ between calls (c.suffix is then -1).
func (c *call) receipt(src Source) receipt {
	r := receipt{id: c.id}
	switch {
	case src == FromLocal:
	case c.suffix >= 0:
		r.suffix = c.suffix
	default:
		r.suffix = -1
		r.suffixes = make([]int64, len(c.plan.keys))
		for i := range c.pends {
			for _, k := range c.part(i) {
				r.suffixes[k] = c.psuf[i]
			}
		}
	}
	return r
}
