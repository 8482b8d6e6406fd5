package engine

import (
	"context"
	"encoding"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// scriptEcho answers every script call in process with a reply of the
// shape lua/multi_window.lua specifies for its arguments: each allow or
// peek admitted with every window empty, each finish op changing every
// key. It reads the arguments as the script would, so that both the
// admissions and the finish ops riding with them are answered, and the
// engine's own work per request (building the ops, reading the replies,
// the queue of FinishAsync) is what is measured. The reply is a new
// slice per call, as go-redis makes one when it reads a real reply.
// Calendar and distinct keys are not answered (an error): the download
// group has none.
type scriptEcho struct {
	calls, ops atomic.Int64 // script calls and the finish ops they carried
}

func (*scriptEcho) DialHook(next redis.DialHook) redis.DialHook { return next }

func (*scriptEcho) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *scriptEcho) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch strings.ToLower(cmd.Name()) {
		case "fcall", "evalsha", "eval":
			if c, ok := cmd.(*redis.IntSliceCmd); ok {
				v, fin, err := echoReply(c.Args())
				if err != nil {
					c.SetErr(err)
					return err
				}
				h.calls.Add(1)
				h.ops.Add(int64(fin))
				c.SetVal(v)
				return nil
			}
		}
		return next(ctx, cmd)
	}
}

// echoEngine returns an engine whose script calls scriptEcho answers in
// process (other commands go to the server at addr), and the hook.
func echoEngine(tb testing.TB, addr string) (*Engine, *scriptEcho) {
	tb.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { rc.Close() })
	h := &scriptEcho{}
	rc.AddHook(h)
	return newEngine(tb, rc, WithKeyPrefix(redistest.Prefix(tb))), h
}

var errEcho = errors.New("engine: scriptEcho cannot answer these arguments")

// echoReply returns the reply to a script call of args ("fcall", name,
// numkeys, keys..., argv...) and how many finish ops it carried.
func echoReply(args []any) ([]int64, int, error) {
	if len(args) < 3 {
		return nil, 0, errEcho
	}
	nkeys, ok := args[2].(int)
	if !ok || len(args) < 3+nkeys+2 {
		return nil, 0, errEcho
	}
	argv := args[3+nkeys+2:] // after t and max_suffix
	out := make([]int64, 2, 2+len(argv))
	out[0], out[1] = 1_790_000_000, 123_456
	fin := 0
	field := func() ([]byte, bool) {
		if len(argv) == 0 {
			return nil, false
		}
		a := argv[0]
		argv = argv[1:]
		switch a := a.(type) {
		case encoding.BinaryMarshaler:
			b, _ := a.MarshalBinary()
			return b, true
		case string:
			return stringBytes(a), true
		}
		return nil, false
	}
	num := func() (int64, bool) {
		b, ok := field()
		if !ok {
			return 0, false
		}
		// strconv copies what an error keeps, so string(b) stays on the
		// stack: no allocation.
		v, err := strconv.ParseInt(string(b), 10, 64)
		return v, err == nil
	}
	skip := func(n int) bool {
		if len(argv) < n {
			return false
		}
		argv = argv[n:]
		return true
	}
	for len(argv) > 0 {
		m, _ := field()
		if len(m) > 0 && m[0] == '-' {
			// '-'..member, nkeys (negative: a channel follows), then per
			// key its first field (kind or mode, with the suffix unless 0)
			// and the rest.
			n, ok := num()
			if !ok {
				return nil, 0, errEcho
			}
			if n < 0 {
				n = -n
				if !skip(1) {
					return nil, 0, errEcho
				}
			}
			out = append(out, 1)
			for range n {
				first, ok := field()
				if !ok || len(first) == 0 {
					return nil, 0, errEcho
				}
				var more int
				switch first[0] {
				case 'C', 'S':
				case 'r', 's':
					more = 3 // delta, at, cost
				case 'g':
					more = 4 // and the grain
				case 'A':
					more = 2
				case 'R':
					more = 3
				default:
					return nil, 0, errEcho
				}
				if !skip(more) {
					return nil, 0, errEcho
				}
				out = append(out, 1)
			}
			fin++
			continue
		}
		// An allow or a peek: admitted, every window empty.
		n, ok := num()
		if !ok {
			return nil, 0, errEcho
		}
		out = append(out, codec.StatusAdmitted)
		for range max(n, -n) {
			nwin, ok := num()
			if !ok {
				return nil, 0, errEcho
			}
			switch {
			case nwin > 0:
				ok = skip(1 + 2*int(nwin))
			case nwin < 0:
				nwin = -nwin
				ok = skip(2 + 3*int(nwin))
			default:
				kind, _ := field()
				switch string(kind) {
				case "S":
					nwin, ok = 1, skip(2)
				case "B":
					nwin, ok = 1, skip(1)
				default:
					ok = false
				}
			}
			if !ok {
				return nil, 0, errEcho
			}
			for range nwin {
				out = append(out, 0)
			}
		}
	}
	return out, fin, nil
}

// BenchmarkFinishAsyncClient measures the engine's client-side work per
// request of the download group (downloadGroup) on 10,000 subjects, with
// script calls answered in process (scriptEcho): its admission alone, and
// its admission then FinishAsync settling to half the estimate and
// releasing its slot, the finish riding the next script call (the
// registry of held slots, which admissions alone fill, is emptied every
// 10,000 requests). It runs
// with one caller and with eight (b.SetParallelism on two cores); ns/op
// and allocs/op are per request. cpu-ns/op is the process's CPU time
// (user and system) per request: on a shared machine it varies less than
// ns/op. ops/call is the finish ops per script call.
//
//	go test -run XXX -bench FinishAsyncClient -benchmem ./engine
func BenchmarkFinishAsyncClient(b *testing.B) {
	s := redistest.Start(b)
	reqs := make([]Request, 10_000)
	for i := range reqs {
		reqs[i] = downloadRequest(b, "u"+strconv.Itoa(i), 1<<20)
		reqs[i].Checks[0].Windows[1].Limit = 1e6 // as in BenchmarkFinish
	}
	out := Outcome{Actual: []int64{-1, 512 << 10}}
	for _, finish := range []bool{false, true} {
		for _, callers := range []int{1, 8} {
			name := "admission"
			if finish {
				name += "+finishasync"
			}
			name += "/callers=" + strconv.Itoa(callers)
			b.Run(name, func(b *testing.B) {
				e, h := echoEngine(b, s.Addr)
				ctx := context.Background()
				var next atomic.Int64
				one := func(i int) {
					d, err := e.Allow(ctx, reqs[i%len(reqs)])
					if err != nil || !d.Allowed || d.Source != "redis" {
						b.Error(d.Source, err)
						return
					}
					if finish {
						e.FinishAsync(d, out)
						return
					}
					if i%len(reqs) == 0 {
						// Admissions alone never release their slots: the
						// registry of held slots would hold every request
						// made, and its growth and the GC's work over it
						// would be measured. Emptied, it holds at most one
						// request per subject, as finished requests leave
						// it.
						e.slots.Clear()
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				if callers == 1 {
					for i := 0; i < b.N; i++ {
						one(i)
					}
				} else {
					b.SetParallelism(callers / 2)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							one(int(next.Add(1)))
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
				_ = e.Close() // lands what is queued
				if n := e.finishAsyncFailures(); n != 0 {
					b.Fatalf("%d FinishAsync calls failed", n)
				}
				if finish {
					if got := h.ops.Load(); got != int64(b.N) {
						b.Fatalf("%d finish ops answered, want %d", got, b.N)
					}
					b.ReportMetric(float64(h.ops.Load())/float64(h.calls.Load()), "ops/call")
				}
			})
		}
	}
}

// processCPU returns the CPU time this process has used, user and
// system, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
