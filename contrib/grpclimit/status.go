package grpclimit

import (
	"fmt"
	"strconv"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

func formatInt(n int64) string { return strconv.FormatInt(n, 10) }

// violation describes one window a call does not fit in, for QuotaFailure:
// its subject is the policy name of the RateLimit fields ("ip-1s").
func violation(pol quota, cost int64) *errdetails.QuotaFailure_Violation {
	desc := fmt.Sprintf("at most %d per %s by %s", pol.Window.Limit, rules.FormatPeriod(pol.Window.Period), pol.Limiter.ID())
	if pol.Limiter.Cost != "" {
		desc = fmt.Sprintf("at most %d units per %s by %s; this call costs %d", pol.Window.Limit, rules.FormatPeriod(pol.Window.Period), pol.Limiter.ID(), cost)
	}
	return &errdetails.QuotaFailure_Violation{Subject: pol.Name, Description: desc}
}

// quota is an advertised window: window Window (with its limit for the
// call) of limiter Limiter, named Name in the rate-limit metadata.
type quota struct {
	Name    string
	Limiter rules.Limiter
	Window  rules.Window
}

// quotaOf returns the quota of pol, a policy of p, with window w.
func quotaOf(p *lifecycle.Plan, pol *lifecycle.Policy, w rules.Window) quota {
	return quota{Name: pol.Name, Limiter: p.Limiters[pol.Check], Window: w}
}

// costOf is what check c counts.
func costOf(c engine.Check) int64 { return max(1, c.Cost) }

// deniedStatus is the status of a call the engine denied: ResourceExhausted
// with RetryInfo, the wait rounded up to whole seconds as the HTTP
// Retry-After (retry), and QuotaFailure naming every window the call does
// not fit in, the denying one first.
func deniedStatus(p *lifecycle.Plan, dec *engine.Decision, cs []engine.Check, primary int, retry int64) error {
	var vs []*errdetails.QuotaFailure_Violation
	name := ""
	add := func(ws engine.WindowState) {
		if pol := p.Lookup(ws.Check, ws.Window); pol != nil && ws.Check < len(cs) {
			vs = append(vs, violation(quotaOf(p, pol, pol.Window), costOf(cs[ws.Check])))
			if name == "" {
				name = pol.Name
			}
		}
	}
	if primary >= 0 {
		add(dec.Windows[primary])
	}
	for i, ws := range dec.Windows {
		if i != primary && ws.Check < len(cs) && ws.Remaining < costOf(cs[ws.Check]) {
			add(ws)
		}
	}
	msg := "rate limit exceeded"
	if name != "" {
		msg += " (" + name + ")"
	}
	msg += "; retry in " + (time.Duration(retry) * time.Second).String()
	return withDetails(codes.ResourceExhausted, msg,
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(retry) * time.Second)},
		&errdetails.QuotaFailure{Violations: vs})
}

// neverStatus is the status of a call that costs more than a whole quota:
// ResourceExhausted without RetryInfo, since no wait would admit it.
func neverStatus(pol quota, cs []engine.Check) error {
	var cost int64 = 1
	for _, c := range cs {
		if c.Limiter.ID() == pol.Limiter.ID() {
			cost = costOf(c)
		}
	}
	msg := fmt.Sprintf("call costs %d, more than the whole quota %s; it can never be admitted", cost, pol.Name)
	return withDetails(codes.ResourceExhausted, msg, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{violation(pol, cost)}})
}

// unavailableStatus is the status of a call refused because Redis failed
// and the fail mode is closed, with the retry delay of the HTTP 503.
func unavailableStatus(retry int64) error {
	return withDetails(codes.Unavailable, "rate limiter unavailable",
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(retry) * time.Second)})
}

func withDetails(c codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st := status.New(c, msg)
	if d, err := st.WithDetails(details...); err == nil {
		st = d
	}
	return st.Err()
}
