package grpclimit_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// BenchmarkUnary measures one unary call over loopback TCP through the
// interceptor, on a real redis-server: a method not limited (the gRPC
// floor), a caller of an exempt role, and a limited call decided in Redis.
// The difference between limited and not limited is the decision's cost
// per call.
func BenchmarkUnary(b *testing.B) {
	f := newFixture(b, setup{
		methods:   map[string]string{ping: "ip:100000/s~10ms; exempt:root"},
		redisAddr: redistest.Start(b).Addr,
	})
	for _, bc := range []struct {
		name   string
		method string
		kv     []string
	}{
		{"unlimited", other, nil},
		{"exempt", ping, []string{"x-user", "ops", "x-roles", "root"}},
		{"limited", ping, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if c := invoke(b, f.conn, bc.method, bc.kv...); c.code() != codes.OK {
					b.Fatal(c.err)
				}
			}
		})
	}
}
