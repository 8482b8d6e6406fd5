package replay

import "slices"

// account adds the decision in r.v on rec to the statistics.
func (r *run) account(rt *route, rec *Record) {
	if !r.v.allowed {
		r.rep.Denied++
	}
	r.minutes.add(rec.Time, r.v.allowed)
	// A subject is counted once per request, even when two rules count
	// it (ip and an anonymous user's ip); it is denied when one of its own
	// windows or blocks refused.
	r.seen = r.seen[:0]
	var denied []string
	for i, c := range r.req.Checks {
		cv := &r.v.checks[i]
		refused := false
		for j := range c.Windows {
			p := rt.stats[rt.index[i][j]]
			p.Requests++
			// A request a block in force refused is the block's denial,
			// whatever the windows say.
			if cv.full[j] && !cv.blocked {
				refused = true
				p.deny(c.Subject, rec.Time)
				if cv.started {
					p.Blocks++
				}
			}
		}
		if b := rt.blockAt[i]; b >= 0 {
			p := rt.stats[b]
			p.Requests++
			if cv.started {
				p.Blocks++
			}
			if cv.blocked {
				refused = true
				p.deny(c.Subject, rec.Time)
			}
		}
		if !slices.Contains(r.seen, c.Subject) {
			r.seen = append(r.seen, c.Subject)
		}
		if refused && !slices.Contains(denied, c.Subject) {
			denied = append(denied, c.Subject)
		}
	}
	for _, s := range r.seen {
		st := r.subjects[s]
		if st == nil {
			st = &SubjectStats{Subject: s}
			r.subjects[s] = st
		}
		st.Requests++
		if slices.Contains(denied, s) {
			st.Denied++
		}
	}
}

// finish fills the report from the statistics.
func (r *run) finish(routes []*route) {
	rep := r.rep
	rep.Lines, rep.Bad, rep.BadFirst = r.lines, r.bad.n, r.bad.first
	rep.Late, rep.LateFirst = r.late.n, r.late.first
	rep.Subjects = make([]SubjectStats, 0, len(r.subjects))
	for _, s := range r.subjects {
		rep.Subjects = append(rep.Subjects, *s)
	}
	sortSubjects(rep.Subjects)
	for _, rt := range routes {
		for _, p := range rt.stats {
			rep.Policies = append(rep.Policies, p.final())
		}
	}
	rep.Minutes, rep.Bucket = r.minutes.series()
}
