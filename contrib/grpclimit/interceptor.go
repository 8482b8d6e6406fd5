package grpclimit

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
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
