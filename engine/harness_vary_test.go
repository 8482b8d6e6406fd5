package engine

import (
	"slices"
	"strconv"

	"github.com/slidelimit/slidelimit/internal/faults"
	"github.com/slidelimit/slidelimit/rules"
)

// The fault harness's requests as the middleware builds them for roles,
// limit functions and rule overrides (middleware/plan.go, limitfunc.go,
// internal/lifecycle.Plan.Checks, role.Policy.Resolve): the group
//
//	user:WINDOWS; exempt:superadmin; role(partner)=ip:ROLE WINDOWS
//
// with role.Policy{ByIP: admin}, one window's limit $quota, and the
// group's limits replaced by the last Override step (SetRules).

// checkOf returns the engine check of q as the middleware builds it, the
// subject the history names its key by, and the limits it is checked
// against by window (nil: the scenario's own); ok is false for a request that
// reaches no engine: an exempt caller, or one costing more than a window's
// whole limit (the middleware refuses it, lifecycle.Plan.Oversized).
func (r *faultRun) checkOf(q faults.Req) (c Check, subject string, limits []int64, ok bool) {
	c = Check{Rule: rules.Rule{Kind: rules.User}, Subject: "s" + strconv.Itoa(q.Subject), Block: r.p.Block}
	subject = c.Subject
	limits = slices.Clone(r.limits)
	switch q.Role {
	case faults.RoleExempt:
		return Check{}, "", nil, false
	case faults.RoleByIP:
		// A shared account: the user rule counts the client's IP
		// (lifecycle.SubjectFor), a key of its own.
		c.Subject = "ip:" + strconv.Itoa(q.Subject)
		subject = "user/" + c.Subject
	case faults.RoleWithRules:
		// The role's rules replace the defaults: an ip rule, of
		// the same kind of windows, with its own limits.
		c.Kind, c.Subject = rules.IP, "ip:"+strconv.Itoa(q.Subject)
		subject = "ip/" + c.Subject
		limits = slices.Clone(r.p.RoleLimits)
	}
	c.Windows = slices.Clone(r.ws)
	for i := range c.Windows {
		if i < len(limits) && limits[i] > 0 {
			c.Windows[i].Limit = limits[i]
		}
		if i == r.p.LimitFunc-1 && q.Role != faults.RoleWithRules && q.Limit > 0 {
			// Resolved by the middleware: the function's value, the
			// window still naming it (rules.Rule.Resolve).
			c.Windows[i].Limit, c.Windows[i].LimitFunc = q.Limit, "quota"
		}
	}
	switch r.p.Mode {
	case "cost":
		c.Rule.Cost = "bytes"
		c.Cost = max(q.Cost, 1)
		for _, w := range c.Windows {
			if c.Cost > w.Limit {
				return Check{}, "", nil, false
			}
		}
	case "distinct":
		c.Distinct = "v" + strconv.Itoa(q.Value)
	}
	limits = make([]int64, len(c.Windows))
	same := true
	for i, w := range c.Windows {
		limits[i] = w.Limit
		same = same && w.Limit == r.p.Windows[i].Limit
	}
	if same {
		limits = nil
	}
	return c, subject, limits, true
}

// subjectReqs returns a request of each key the scenario's requests may use,
// by the subject the history names it: the scenario's subjects, and with roles
// the IPs of callers counted by IP and of the role with rules of its own.
func (r *faultRun) subjectReqs() (names []string, reqs []faults.Req) {
	for s := range r.p.Subjects {
		roles := []string{""}
		if r.p.RoleLimits != nil {
			roles = append(roles, faults.RoleByIP, faults.RoleWithRules)
		}
		for _, role := range roles {
			q := faults.Req{Subject: s, Role: role}
			if r.p.LimitFunc > 0 {
				q.Limit = r.p.Windows[r.p.LimitFunc-1].Limit
			}
			_, name, _, _ := r.checkOf(q)
			names, reqs = append(names, name), append(reqs, q)
		}
	}
	return names, reqs
}

// override applies an Override step: from now on every engine's requests
// have the group's new limits, as every process applies a SetRules (within
// a second in production; at once here, which the model does not need:
// each admission is bounded by its own request's limits).
func (r *faultRun) override(s faults.Step) {
	for i := range r.limits {
		if i < len(s.Limits) && s.Limits[i] > 0 {
			r.limits[i] = s.Limits[i]
		}
	}
}
