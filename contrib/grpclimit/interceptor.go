package grpclimit

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// UnaryServerInterceptor returns the interceptor that limits unary calls.
// Chain it after the service's authentication interceptor, which puts the
// caller in the context with role.NewContext:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(auth, lim.UnaryServerInterceptor()))
func (l *Interceptors) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		m := l.lookup(info.FullMethod)
		if m == nil {
			return handler(ctx, req)
		}
		c, v, err := l.admit(ctx, m, info.FullMethod, req, unaryCall{ctx})
		if err != nil {
			return nil, err
		}
		md := responseMD(&v)
		if !v.Finish {
			c.release()
		}
		if !v.Finish && md == nil {
			return handler(ctx, req)
		}
		hctx := ctx
		if v.Context != nil {
			hctx = v.Context
		}
		var written int64 // of the response, for Settlement.Written
		panicked := true
		defer func() {
			if v.Finish {
				c.end(err, panicked, written)
			}
		}()
		resp, err = handler(hctx, req)
		panicked = false
		if err == nil && v.Written {
			written = messageSize(resp)
		}
		// The response headers go out with the response message; a call
		// that fails has none, and its metadata goes in the trailers.
		if md != nil && (err != nil || grpc.SetHeader(ctx, md) != nil) {
			_ = grpc.SetTrailer(ctx, md)
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
func (l *Interceptors) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		m := l.lookup(info.FullMethod)
		if m == nil {
			return handler(srv, ss)
		}
		c, v, err := l.admit(ss.Context(), m, info.FullMethod, nil, ss)
		if err != nil {
			return err
		}
		md := responseMD(&v)
		if !v.Finish {
			c.release()
		}
		if !v.Finish && md == nil {
			return handler(srv, ss)
		}
		stream := ss
		var hs *headerStream
		if md != nil {
			hs = &headerStream{ServerStream: ss, md: md}
			stream = hs
		}
		var cs *settleStream
		if v.Context != nil {
			cs = &settleStream{ServerStream: stream, ctx: v.Context, count: v.Written}
			stream = cs
		}
		panicked := true
		defer func() {
			var written int64
			if cs != nil {
				written = cs.written
			}
			if v.Finish {
				c.end(err, panicked, written)
			}
		}()
		err = handler(srv, stream)
		if hs != nil && !hs.sent {
			ss.SetTrailer(md)
		}
		panicked = false
		return err
	}
}

// settleStream gives a settled stream's handler the context ReportCost
// reads and, for Settlement.Written, counts the bytes of the messages it
// sends. Like any grpc.ServerStream, it is used by one goroutine at a time.
type settleStream struct {
	grpc.ServerStream
	ctx     context.Context
	count   bool  // measure the messages sent
	written int64 // their size; negative once one cannot be measured
}

// Context implements grpc.ServerStream.
func (s *settleStream) Context() context.Context { return s.ctx }

// SendMsg implements grpc.ServerStream.
func (s *settleStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil && s.count && s.written >= 0 {
		if n := messageSize(m); n >= 0 {
			s.written += n
		} else {
			s.written = -1
		}
	}
	return err
}

// messageSize returns the serialized size of m, a response message, as
// grpc's proto codec encodes it; -1 when m is not a protobuf message (a
// service with another codec), whose size is unknown.
func messageSize(m any) int64 {
	var pm proto.Message
	switch v := m.(type) {
	case protoadapt.MessageV1:
		pm = protoadapt.MessageV2Of(v)
	case proto.Message:
		pm = v
	default:
		return -1
	}
	return int64(proto.Size(pm))
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
