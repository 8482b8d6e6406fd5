package grpclimit

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// UnaryServerInterceptor returns the interceptor that limits unary calls.
// Chain it after the service's authentication interceptor, which puts the
// caller in the context with role.NewContext:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(auth, lim.UnaryServerInterceptor()))
func (l *Limiter) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		m := l.lookup(info.FullMethod)
		if m == nil {
			return handler(ctx, req)
		}
		c, err := l.admit(ctx, m, info.FullMethod, req, unaryCall{ctx})
		if err != nil {
			return nil, err
		}
		if c == nil {
			return handler(ctx, req)
		}
		panicked := true
		defer func() { l.after(c, err, panicked) }()
		resp, err = handler(ctx, req)
		panicked = false
		// The response headers go out with the response message; a call
		// that fails has none, and its metadata goes in the trailers.
		if c.md != nil && (err != nil || grpc.SetHeader(ctx, c.md) != nil) {
			_ = grpc.SetTrailer(ctx, c.md)
		}
		return resp, err
	}
}

// StreamServerInterceptor returns the interceptor that limits streams. A
// stream is one call at its start: it is decided and counted once,
// whatever the number of messages, before the handler runs; cost
// functions receive a nil request. Chain it after the service's
// authentication interceptor:
//
//	grpc.NewServer(grpc.ChainStreamInterceptor(auth, lim.StreamServerInterceptor()))
func (l *Limiter) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		m := l.lookup(info.FullMethod)
		if m == nil {
			return handler(srv, ss)
		}
		c, err := l.admit(ss.Context(), m, info.FullMethod, nil, ss)
		if err != nil {
			return err
		}
		if c == nil {
			return handler(srv, ss)
		}
		var hs *headerStream
		if c.md != nil {
			hs = &headerStream{ServerStream: ss, md: c.md}
		}
		panicked := true
		defer func() { l.after(c, err, panicked) }()
		if hs != nil {
			err = handler(srv, hs)
			if !hs.sent {
				ss.SetTrailer(c.md)
			}
		} else {
			err = handler(srv, ss)
		}
		panicked = false
		return err
	}
}

// headerStream adds the rate-limit metadata to a stream's response
// headers when the handler sends them (its first message, or SendHeader),
// so that a stream failing before it sends anything stays Trailers-Only.
// Like any grpc.ServerStream, it is used by one goroutine at a time.
type headerStream struct {
	grpc.ServerStream
	md          metadata.MD
	tried, sent bool
}

func (s *headerStream) flush() {
	if !s.tried {
		s.tried = true
		s.sent = s.ServerStream.SetHeader(s.md) == nil
	}
}

// SendHeader implements grpc.ServerStream.
func (s *headerStream) SendHeader(md metadata.MD) error {
	s.flush()
	return s.ServerStream.SendHeader(md)
}

// SendMsg implements grpc.ServerStream.
func (s *headerStream) SendMsg(m any) error {
	s.flush()
	return s.ServerStream.SendMsg(m)
}

// trailerSetter sets a refused call's trailer metadata: a
// grpc.ServerStream, or unaryCall for a unary call's context.
type trailerSetter interface {
	SetTrailer(metadata.MD)
}

type unaryCall struct{ ctx context.Context }

func (u unaryCall) SetTrailer(md metadata.MD) { _ = grpc.SetTrailer(u.ctx, md) }

// Response metadata keys. ratelimit-policy and ratelimit carry the values
// of the HTTP RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers); grpc-retry-pushback-ms is the
// server pushback of gRFC A6, which grpc-go's retry policy honours.
const (
	mdPolicy    = "ratelimit-policy"
	mdRateLimit = "ratelimit"
	mdPushback  = "grpc-retry-pushback-ms"
)

// admitted is an admitted call with work after its handler: response
// metadata to send, or an outcome that decides whether it stays counted
// (a group with count:).
type admitted struct {
	ctx  context.Context
	m    *method
	req  engine.Request
	dec  engine.Decision
	give bool        // given back unless its code is listed in count:
	md   metadata.MD // the rate-limit metadata; nil for none
}

// admit decides a call of m. It returns a non-nil *admitted when the
// handler must run with work after it; nil and nil when the handler must
// run and nothing follows; nil and a status error when the call is
// refused, whose metadata it has set.
func (l *Limiter) admit(ctx context.Context, m *method, fullMethod string, req any, out trailerSetter) (*admitted, error) {
	id, _ := role.FromContext(ctx)
	res := l.policy.Resolve(m.group, id)
	p := m.planFor(res)
	if res.Exempt || p == nil || len(p.Limiters()) == 0 {
		l.emit(middleware.Event{Role: res.Role, Exempt: true, Allowed: true})
		return nil, nil
	}
	shadow := m.group.Mode == rules.Shadow
	scope := m.group.Scope
	if scope == "" {
		scope = fullMethod
	}
	ev := middleware.Event{Scope: scope, Role: res.Role, Shadow: shadow}
	checks := p.Checks(id, res, &source{ctx: ctx, l: l})
	if err := l.price(ctx, fullMethod, req, p, checks); err != nil {
		code, msg, level, httpStatus := codes.Internal, "internal error", slog.LevelError, 500
		if errors.Is(err, middleware.ErrCostBadRequest) {
			code, msg, level, httpStatus = codes.InvalidArgument, "request cannot be costed", slog.LevelInfo, 400
		}
		l.logger.LogAttrs(ctx, level, "slidelimit: cost function failed; call not counted",
			slog.String("scope", scope), slog.Any("error", err))
		ev.Err = err
		if shadow {
			ev.Allowed = true
			l.emit(ev)
			return nil, nil
		}
		ev.Status = httpStatus
		l.emit(ev)
		return nil, status.Error(code, msg)
	}
	if pol, ok := p.Oversized(checks); ok {
		l.logger.LogAttrs(ctx, slog.LevelInfo, "slidelimit: call costs more than a whole quota",
			slog.String("scope", scope), slog.String("policy", pol.Name))
		ev.Limiter, ev.Policy, ev.Window = pol.Limiter.ID(), pol.Name, pol.Window
		if shadow {
			ev.Allowed = true
			l.emit(ev)
			return nil, nil
		}
		ev.Status = 429
		l.emit(ev)
		out.SetTrailer(metadata.Pairs(mdPolicy, p.PolicyField(), mdPushback, "-1"))
		return nil, neverStatus(pol, checks)
	}

	r := engine.Request{Scope: scope, Checks: checks, Fail: m.group.Fail}
	begin := time.Now()
	dec, err := l.decider.Allow(ctx, r)
	ev.Latency = time.Since(begin)
	ev.Allowed, ev.RetryAfter, ev.Source, ev.Err, ev.Decision = dec.Allowed, dec.RetryAfter, dec.Source, err, dec
	var retry int64 // the advertised wait of a refusal, which caps t
	if !dec.Allowed && !shadow {
		retry = middleware.RetryAfterSeconds(dec.RetryAfter)
	}
	values, primary := p.RateLimit(&dec, retry)
	if primary >= 0 {
		if pol, ok := p.Policy(dec.Windows[primary]); ok {
			ev.Limiter, ev.Policy, ev.Window = pol.Limiter.ID(), pol.Name, pol.Window
		}
	}
	if err != nil {
		if errors.Is(err, engine.ErrInvalid) {
			l.logger.LogAttrs(ctx, slog.LevelError, "slidelimit: engine rejected request",
				slog.String("scope", scope), slog.Any("error", err))
			if shadow {
				l.emit(ev)
				return nil, nil
			}
			ev.Status = 500
			l.emit(ev)
			return nil, status.Error(codes.Internal, "internal error")
		}
		l.logBackend(ctx, scope, dec, err)
	}
	var next *admitted
	if dec.Allowed && m.counted != 0 {
		next = &admitted{ctx: ctx, m: m, req: r, dec: dec, give: true}
	}
	switch {
	case shadow:
		if !dec.Allowed {
			l.logger.LogAttrs(ctx, slog.LevelInfo, "slidelimit: shadow mode would deny call",
				slog.String("scope", scope), slog.String("policy", ev.Policy),
				slog.Duration("retry_after", dec.RetryAfter), slog.String("source", dec.Source.String()))
		}
		l.emit(ev)
		return next, nil
	case dec.Allowed:
		if md := fields(p.PolicyField(), values); len(md) > 0 {
			if next == nil {
				next = &admitted{}
			}
			next.md = md
		}
		l.emit(ev)
		return next, nil
	}
	// A refusal's metadata goes in the trailers, leaving the response
	// Trailers-Only: response headers would commit the call, and a gRPC
	// client never retries a committed call (gRFC A6).
	pushback := formatInt(retry * 1000)
	if dec.Source == engine.FromFailClosed {
		ev.Status = 503
		l.emit(ev)
		out.SetTrailer(metadata.Pairs(mdPolicy, p.PolicyField(), mdPushback, pushback))
		return nil, unavailableStatus(retry)
	}
	ev.Status = 429
	l.emit(ev)
	md := fields(p.PolicyField(), values)
	md[mdPushback] = []string{pushback}
	out.SetTrailer(md)
	return nil, deniedStatus(p, &dec, checks, primary, retry)
}

// emit gives ev to the hooks.
func (l *Limiter) emit(ev middleware.Event) {
	for _, h := range l.hooks {
		h(ev)
	}
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

// price sets the cost of every check whose limiter names a cost function,
// calling each function once.
func (l *Limiter) price(ctx context.Context, fullMethod string, req any, p *middleware.Plan, cs []engine.Check) error {
	var called map[string]int64
	for i, lim := range p.Limiters() {
		if lim.Cost == "" || isDecimal(lim.Cost) {
			continue
		}
		n, ok := called[lim.Cost]
		if !ok {
			var err error
			n, err = l.costs[lim.Cost](ctx, fullMethod, req)
			if err != nil || n < 1 {
				return &middleware.CostError{Name: lim.Cost, Limiter: lim.ID(), Cost: n, Err: err}
			}
			if called == nil {
				called = make(map[string]int64, 1)
			}
			called[lim.Cost] = n
		}
		cs[i].Cost = n
	}
	return nil
}

// after gives an admitted call of a group with count: back unless its
// status is listed. A handler that panics leaves the call counted: its
// outcome is unknown, and counting it errs on the side of denying.
func (l *Limiter) after(c *admitted, err error, panicked bool) {
	if !c.give || panicked || c.m.counted.has(status.Code(err)) {
		return
	}
	ctx := context.WithoutCancel(c.ctx)
	if gerr := l.giver.GiveBack(ctx, c.req, c.dec); gerr != nil {
		l.logger.LogAttrs(ctx, slog.LevelWarn, "slidelimit: give-back failed; the call stays counted until retried",
			slog.String("scope", c.req.Scope), slog.String("code", status.Code(err).String()), slog.Any("error", gerr))
	}
}

// logBackend logs a backend error at most once a second: an outage must
// not log a line per call.
func (l *Limiter) logBackend(ctx context.Context, scope string, dec engine.Decision, err error) {
	now := time.Now().UnixNano()
	next := l.nextLog.Load()
	if now < next || !l.nextLog.CompareAndSwap(next, now+int64(time.Second)) {
		return
	}
	l.logger.LogAttrs(ctx, slog.LevelWarn, "slidelimit: rate-limit backend error (logged at most once a second)",
		slog.String("scope", scope), slog.String("source", dec.Source.String()),
		slog.Bool("allowed", dec.Allowed), slog.Any("error", err))
}

// source is the middleware.SubjectSource of a call: the peer address and
// proxy metadata for ip, incoming metadata for header(name), the key
// functions for key(name).
type source struct {
	ctx  context.Context
	l    *Limiter
	md   metadata.MD
	read bool
	ip   string
}

func (s *source) metadata() metadata.MD {
	if !s.read {
		s.md, _ = metadata.FromIncomingContext(s.ctx)
		s.read = true
	}
	return s.md
}

// ClientIP implements middleware.SubjectSource.
func (s *source) ClientIP() string {
	if s.ip == "" {
		var addr string
		if p, ok := peer.FromContext(s.ctx); ok && p.Addr != nil {
			addr = p.Addr.String()
		}
		s.ip = s.l.cip.Subject(addr, mdHeader(s.metadata()))
	}
	return s.ip
}

// Value implements middleware.SubjectSource.
func (s *source) Value(_ int, lim rules.Limiter) string {
	switch lim.Kind {
	case rules.Header:
		if vs := s.metadata().Get(lim.Name); len(vs) > 0 {
			return vs[0]
		}
	case rules.Key:
		return s.l.keys[lim.Name](s.ctx)
	}
	return ""
}

// mdHeader gives middleware.ClientIP the values of incoming metadata,
// whose keys are lower case.
type mdHeader metadata.MD

func (h mdHeader) Values(name string) []string { return metadata.MD(h).Get(name) }
