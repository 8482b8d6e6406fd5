package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/slidelimit/slidelimit/contrib/grpclimit"
	"github.com/slidelimit/slidelimit/engine"
)

// A health service whose Check method takes at most 2 calls a minute per
// client IP, and whose Watch stream is exempt: the third Check is refused
// with ResourceExhausted, a RetryInfo and a QuotaFailure.
func Example() {
	m := miniredis.NewMiniRedis() // any Redis; an embedded one keeps the example self-contained
	if err := m.Start(); err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rc.Close()
	eng, err := engine.New(rc)
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	lim, err := grpclimit.New(eng, map[string]string{
		"/grpc.health.v1.Health/Check": "ip:2/min",
	}, grpclimit.WithExempt("/grpc.health.v1.Health/Watch"))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(lim.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(lim.StreamServerInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		var header metadata.MD
		resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		if err == nil {
			fmt.Println(resp.Status, header.Get("ratelimit"))
			continue
		}
		st := status.Convert(err)
		fmt.Println(st.Code(), st.Message())
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("  retry in", d.RetryDelay.AsDuration())
			case *errdetails.QuotaFailure:
				for _, v := range d.Violations {
					fmt.Printf("  violated %s: %s\n", v.Subject, v.Description)
				}
			}
		}
	}
	// Output:
	// SERVING ["ip-1min";r=1;t=60]
	// SERVING ["ip-1min";r=0;t=60]
	// ResourceExhausted rate limit exceeded (ip-1min); retry in 1m0s
	//   retry in 1m0s
	//   violated ip-1min: at most 2 per 1min by ip
}
