package grpclimit

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/slidelimit/slidelimit/rules"
	"github.com/slidelimit/slidelimit/transport"
)

// gcall is one call's way through the interceptors: its Admission, which
// runs the call's life (package transport), and what the Interceptors
// translates into it. A *gcall is the Admission's transport.Source, which
// puts it on the heap; calls keeps them for reuse, so that a call costs no
// allocation of its own (an exempt caller's included).
type gcall struct {
	transport.Admission
	l      *Interceptors
	ctx    context.Context
	method string
	req    any // the request message of a unary call; nil for a stream
	md     metadata.MD
	read   bool // md is read
}

// calls are gcalls to reuse: a gcall is free once its Finish has run, or
// when its call was refused or needs no Finish.
var calls = sync.Pool{New: func() any { return new(gcall) }}

// release makes c free for another call; nothing may use it after.
func (c *gcall) release() {
	*c = gcall{}
	calls.Put(c)
}

// admit decides a call of m. It returns the call, which the caller must
// release, and its Verdict when the handler must run; a status error, with
// the refused call's metadata set on out, when the call is refused.
func (l *Interceptors) admit(ctx context.Context, m *method, fullMethod string, req any, out trailerSetter) (*gcall, transport.Verdict, error) {
	c := calls.Get().(*gcall)
	c.l, c.ctx, c.method, c.req = l, ctx, fullMethod, req
	scope := m.scope
	if scope == "" {
		scope = fullMethod
	}
	v := c.Admit(ctx, m.group, scope, c)
	if v.Status == 0 {
		return c, v, nil
	}
	c.release()
	return nil, v, refusal(&v, out)
}

// refusal translates a refused call's Verdict into gRPC: a denial's
// metadata goes in the trailers, leaving the response Trailers-Only:
// response headers would commit the call, and a gRPC client never retries
// a committed call (gRFC A6).
func refusal(v *transport.Verdict, out trailerSetter) error {
	switch {
	case v.Status == 400:
		return status.Error(codes.InvalidArgument, "request cannot be costed")
	case v.Status == 503:
		md := fields(v.Policy, nil)
		md[mdPushback] = []string{formatInt(v.Retry * 1000)}
		out.SetTrailer(md)
		return unavailableStatus(v.Retry)
	case v.Never:
		md := fields(v.Policy, nil)
		md[mdPushback] = []string{"-1"} // gRFC A6: do not retry
		out.SetTrailer(md)
		return neverStatus(v.Quotas[0])
	case v.Status == 429:
		md := fields(v.Policy, v.Values)
		md[mdPushback] = []string{formatInt(v.Retry * 1000)}
		out.SetTrailer(md)
		return deniedStatus(v.Quotas, v.Retry)
	}
	return status.Error(codes.Internal, "internal error")
}

// fields returns the ratelimit-policy and ratelimit metadata.
func fields(policy string, values []string) metadata.MD {
	md := metadata.MD{}
	if policy != "" {
		md[mdPolicy] = []string{policy}
	}
	if len(values) > 0 {
		md[mdRateLimit] = values
	}
	return md
}

// responseMD returns the rate-limit metadata of an admitted call's
// response; nil for none (shadow mode, exempt callers).
func responseMD(v *transport.Verdict) metadata.MD {
	if v.Policy == "" && len(v.Values) == 0 {
		return nil
	}
	return fields(v.Policy, v.Values)
}

// end is the call's finish, however its handler ended: its status code
// decides whether a group with count: gives it back; a handler that
// panicked leaves it counted at its estimate. It releases c.
func (c *gcall) end(err error, panicked bool, written int64) {
	c.Finish(int(status.Code(err)), panicked, written)
	c.release()
}

// Peer implements transport.Source: the peer address, and the incoming
// metadata for a trusted proxy's header.
func (c *gcall) Peer() (string, interface{ Values(string) []string }) {
	var addr string
	if p, ok := peer.FromContext(c.ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	return addr, mdHeader(c.metadata())
}

// Value implements transport.Source: incoming metadata for header(name),
// the key functions for key(name).
func (c *gcall) Value(lim rules.Rule) string {
	switch lim.Kind {
	case rules.Header:
		if vs := c.metadata().Get(lim.Name); len(vs) > 0 {
			return vs[0]
		}
	case rules.Key:
		return c.l.keys[lim.Name](c.ctx)
	}
	return ""
}

// Cost implements transport.Source.
func (c *gcall) Cost(name string) (int64, error) { return c.l.costs[name](c.ctx, c.method, c.req) }

func (c *gcall) metadata() metadata.MD {
	if !c.read {
		c.md, _ = metadata.FromIncomingContext(c.ctx)
		c.read = true
	}
	return c.md
}
