package regions

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// BenchmarkApply applies batches of Batch admissions to a real
// redis-server and reports the server's CPU per entry (INFO
// commandstats: the script calls' time over the entries): each entry in
// a key of its own, new to the peer (a region's new subjects), and the
// same keys again (subjects every region sees; each batch a new
// stamp).
//
//	go test -run XXX -bench Apply ./internal/regions
func BenchmarkApply(b *testing.B) {
	for _, tc := range []struct {
		name  string
		fresh bool
	}{{"new-keys", true}, {"same-keys", false}} {
		b.Run(tc.name, func(b *testing.B) {
			_, c := redistest.StartClient(b)
			ctx := context.Background()
			keep := int64(time.Minute / time.Microsecond)
			stamp := time.Now().UnixMicro()
			batch := make([]*pending, DefaultBatch)
			next := 0
			fill := func() {
				for i := range batch {
					k := i
					if tc.fresh {
						k = next
						next++
					}
					stamp++
					batch[i] = &pending{Entry: Entry{Key: "regions:{user" + strconv.Itoa(k) + "}:api", Member: strconv.FormatInt(stamp, 10), Stamp: stamp, Keep: keep}}
				}
			}
			fill()
			if _, err := apply(ctx, c, batch, DefaultBatch, "", nil); err != nil {
				b.Fatal(err)
			}
			c.ConfigResetStat(ctx)
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				fill()
				b.StartTimer()
				if _, err := apply(ctx, c, batch, DefaultBatch, "", nil); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			usec, calls := scriptTime(b, c)
			b.ReportMetric(usec/float64(b.N*len(batch)), "server-µs/entry")
			b.ReportMetric(calls/float64(b.N*len(batch)), "calls/entry")
		})
	}
}

// scriptTime returns the server's time in script calls (µs) and the
// commands the scripts called, from INFO commandstats.
func scriptTime(b *testing.B, c *redis.Client) (usec, calls float64) {
	for name, st := range redistest.CommandStats(b, c) {
		switch name {
		case "evalsha", "eval":
			usec += float64(st.Usec)
		case "config|resetstat", "info":
		default:
			calls += float64(st.Calls)
		}
	}
	return usec, calls
}

// BenchmarkCalls measures the Go side of a batch: turning DefaultBatch
// admissions, each in a key of its own, into the script's calls, per
// entry (the replicator does it once per peer).
func BenchmarkCalls(b *testing.B) {
	stamp := time.Now().UnixMicro()
	batch := make([]*pending, DefaultBatch)
	for i := range batch {
		batch[i] = newPending(Entry{Key: "regions:{user" + strconv.Itoa(i) + "}:api", Member: strconv.FormatInt(stamp, 10) + "0", Stamp: stamp + int64(i), Keep: int64(time.Minute / time.Microsecond)})
	}
	b.ReportAllocs()
	for b.Loop() {
		if cs := calls(batch, false); len(cs) != 1 {
			b.Fatal(len(cs))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/entry")
}
