package grpclimit

import (
	"context"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/slidelimit/slidelimit/rules"
)

// source is the lifecycle.SubjectSource of a call: the peer address and
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

// ClientIP implements lifecycle.SubjectSource.
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

// Value implements lifecycle.SubjectSource.
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

// mdHeader gives lifecycle.ClientIP the values of incoming metadata,
// whose keys are lower case.
type mdHeader metadata.MD

func (h mdHeader) Values(name string) []string { return metadata.MD(h).Get(name) }
