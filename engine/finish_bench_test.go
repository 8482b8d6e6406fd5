package engine

import (
	"context"
	"strconv"
	"testing"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// BenchmarkFinish measures the download group (downloadGroup) on 10,000
// subjects, one caller: its admission alone, and its admission then
// Finish (or FinishAsync) settling to the bytes written and releasing its
// slot. With -benchmem, allocs/op is per request.
func BenchmarkFinish(b *testing.B) {
	s := redistest.Start(b)
	ctx := context.Background()
	reqs := make([]Request, 10_000)
	for i := range reqs {
		reqs[i] = downloadRequest(b, "u"+strconv.Itoa(i), 1<<20)
		reqs[i].Checks[0].Windows[1].Limit = 1e6 // admissions alone never release
	}
	out := Outcome{Actual: []int64{-1, 512 << 10}}
	for _, finish := range []string{"", "finish", "finishasync"} {
		name := "admission"
		if finish != "" {
			name += "+" + finish
		}
		b.Run(name, func(b *testing.B) {
			e := newEngine(b, s.Client(), WithKeyPrefix(redistest.Prefix(b)))
			i := 0
			for b.Loop() {
				d, err := e.Allow(ctx, reqs[i%len(reqs)])
				if err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
				switch finish {
				case "finish":
					if err := e.Finish(ctx, d, out); err != nil {
						b.Fatal(err)
					}
				case "finishasync":
					e.FinishAsync(d, out)
				}
				i++
			}
		})
	}
}
