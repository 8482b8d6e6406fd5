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
				used++
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
		d.Denied = &d.Windows[denied]
	}
	return d
}
