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

	"github.com/slidelimit/slidelimit/transport"
)

func formatInt(n int64) string { return strconv.FormatInt(n, 10) }

// violation describes one window a call does not fit in, for QuotaFailure:
// its subject is the policy name of the RateLimit fields ("ip-1s").
func violation(q transport.Quota) *errdetails.QuotaFailure_Violation {
	desc := fmt.Sprintf("at most %d per %s by %s", q.Window.Limit, q.Period, q.Rule.ID())
	if q.Rule.Cost != "" {
		desc = fmt.Sprintf("at most %d units per %s by %s; this call costs %d", q.Window.Limit, q.Period, q.Rule.ID(), q.Cost)
	}
	return &errdetails.QuotaFailure_Violation{Subject: q.Name, Description: desc}
}

// deniedStatus is the status of a call the engine denied: ResourceExhausted
// with RetryInfo, the wait rounded up to whole seconds as the HTTP
// Retry-After (retry), and QuotaFailure naming every window the call does
// not fit in, qs, the denying one first.
func deniedStatus(qs []transport.Quota, retry int64) error {
	vs := make([]*errdetails.QuotaFailure_Violation, len(qs))
	for i, q := range qs {
		vs[i] = violation(q)
	}
	msg := "rate limit exceeded"
	if len(qs) > 0 {
		msg += " (" + qs[0].Name + ")"
	}
	msg += "; retry in " + (time.Duration(retry) * time.Second).String()
	return withDetails(codes.ResourceExhausted, msg,
		&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(retry) * time.Second)},
		&errdetails.QuotaFailure{Violations: vs})
}

// neverStatus is the status of a call that costs more than a whole quota,
// q: ResourceExhausted without RetryInfo, since no wait would admit it.
func neverStatus(q transport.Quota) error {
	msg := fmt.Sprintf("call costs %d, more than the whole quota %s; it can never be admitted", q.Cost, q.Name)
	return withDetails(codes.ResourceExhausted, msg, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{violation(q)}})
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
