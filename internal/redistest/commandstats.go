package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one command's counters in INFO commandstats: how many
// times the server ran it and the time it took (µs; a script's includes
// the commands it ran).
type CommandStat struct{ Calls, Usec int64 }

// CommandStats returns c's server's INFO commandstats by command name
// ("zadd", "evalsha", "config|resetstat", ...). It fails tb when the
// server does not answer.
func CommandStats(tb testing.TB, c *redis.Client) map[string]CommandStat {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]CommandStat{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		calls, rest, _ := strings.Cut(rest, ",usec=")
		usec, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		u, _ := strconv.ParseInt(usec, 10, 64)
		out[name] = CommandStat{Calls: n, Usec: u}
	}
	return out
}
