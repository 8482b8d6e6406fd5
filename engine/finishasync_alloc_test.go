//go:build !race

// The race detector's sync.Pool drops a random share of what it is
// given, so allocation counts vary under -race: this file's tests exist
// only without it (go test ./engine), rather than skipping under it.

package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestFinishAsyncNoAlloc: a download's FinishAsync, and carrying its
// finish op in the next script call, allocate nothing: a request admitted
// then finished allocates no more than one only admitted. Script calls
// are answered in process (scriptEcho), so that only the engine's
// allocations count.
func TestFinishAsyncNoAlloc(t *testing.T) {
	s, _ := redistest.StartClient(t)
	e, h := echoEngine(t, s.Addr)
	ctx := context.Background()
	reqs := make([]Request, 100)
	for i := range reqs {
		reqs[i] = downloadRequest(t, fmt.Sprint("u", i), 1<<20)
	}
	out := Outcome{Actual: []int64{-1, 512 << 10}}
	i := 0
	admit := func(finish bool) {
		d, err := e.Allow(ctx, reqs[i%len(reqs)])
		i++
		if err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
		if finish {
			e.FinishAsync(d, out)
		}
	}
	for range 2 * len(reqs) { // every key known, the buffers grown
		admit(true)
	}
	withFinish := testing.AllocsPerRun(1000, func() { admit(true) })
	alone := testing.AllocsPerRun(1000, func() { admit(false) })
	if withFinish > alone {
		t.Errorf("a request admitted and finished allocates %v times, one only admitted %v", withFinish, alone)
	}
	e.async.Drain(false)
	if got, want := h.ops.Load(), int64(2*len(reqs)+1001); got != want {
		t.Errorf("%d finish ops answered, want %d", got, want)
	}
}
