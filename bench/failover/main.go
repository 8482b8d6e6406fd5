// Command failover measures what a Redis Cluster failover (SIGKILL of a
// master, 3 masters + 3 replicas on loopback) does to go-redis and to the
// slidelimit engine: how long a ClusterClient keeps routing to the dead
// node, whether a hung node makes the other nodes' commands of a pipeline
// fail, how many acknowledged admissions asynchronous replication loses,
// and what WAIT after each script call costs. It starts and stops its own
// redis-server processes. See README.md for the results.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	modes := flag.String("modes", "routing,hung,loss,waitcost", "comma-separated: routing, hung, loss, waitcost")
	routeWait := flag.Duration("route-wait", 70*time.Second, "how long to watch the clients after the kill (routing)")
	runs := flag.Int("runs", 3, "failover runs per loss setting")
	dur := flag.Duration("dur", 3*time.Second, "measurement time per waitcost cell")
	flag.Parse()
	redis.SetLogger(quiet{}) // go-redis logs every failed dial to the dead node
	for _, m := range strings.Split(*modes, ",") {
		var err error
		switch m {
		case "routing":
			err = runRouting(*routeWait)
		case "hung":
			err = runHung()
		case "loss":
			err = runLoss(*runs)
		case "waitcost":
			err = runWaitCost(*dur)
		default:
			err = fmt.Errorf("unknown mode %q", m)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "failover:", err)
			os.Exit(1)
		}
	}
}
