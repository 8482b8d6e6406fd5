package engine

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// BenchmarkAllowRegions measures the request path with regions against
// the same limiter without them, in one run: 2 windows, 10,000 keys, on
// the region's own redis-server. Mode "on" has two peer regions' servers
// (no added delay: replication runs beside the decisions, never in them,
// but on this machine's cores); mode "cut" has peers that never answer,
// which leaves the request path alone: the share rule's script work and
// the hand-over to the replicator's queue (full after 65,536 entries).
//
//	go test -run XXX -bench AllowRegions -benchtime 3s ./engine
func BenchmarkAllowRegions(b *testing.B) {
	local := redistest.Start(b).Client()
	us, ap := redistest.Start(b).Client(), redistest.Start(b).Client()
	ws := []rules.Window{win(100_000, 100*ms), win(1_000_000, time.Second)}
	dead := map[string]Client{}
	for _, name := range []string{"us", "ap"} {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 20 * time.Millisecond})
		b.Cleanup(func() { c.Close() })
		dead[name] = c
	}
	for _, mode := range []string{"off", "on", "cut"} {
		for _, par := range []int{1, 64} {
			b.Run("regions="+mode+"/callers="+strconv.Itoa(par), func(b *testing.B) {
				opts := []Option{WithKeyPrefix(redistest.Prefix(b))}
				switch mode {
				case "on":
					opts = append(opts, WithRegions("eu", map[string]Client{"us": us, "ap": ap}))
				case "cut":
					opts = append(opts, WithRegions("eu", dead))
				}
				benchAllow(b, newEngine(b, local, opts...), ws, 10_000, par)
			})
		}
	}
}
