package replay

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// TestDifferentialRedis replays random out-of-order traffic twice, in
// process and through the engine's script on a real Redis, and requires
// the same decision for every request: several windows, costs, blocks and
// count:.
func TestDifferentialRedis(t *testing.T) {
	srv := redistest.Start(t)
	for i, text := range []string{
		"ip:4/s,15/min,40/10min; user:20/min",
		"ip[bytes]:4000/s,20000/min; user[3]:12/s; block:5s",
		"ip:3/100ms,8/s; user[bytes]:5000/10s; block:2s; count:2xx,404",
		"global:50/s; ip:10/s; block:1s; count:2xx",
	} {
		rng := rand.New(rand.NewPCG(uint64(i), 11))
		rs := traffic(rng, 1500, 5*time.Minute, time.Millisecond)
		slices.SortStableFunc(rs, func(a, b req) int { return a.t.Compare(b.t) })
		p := writeLog(t, "access.log", shuffleNear(rng, rs, 10*time.Second), req.json)
		decide := func(decider, url string) ([]bool, *Report) {
			var got []bool
			rep, err := Run(context.Background(), Config{
				Routes: []RouteRules{{Text: text, Origin: "-rules"}}, Inputs: []Input{{Name: p}},
				Fields:  Fields{Time: "ts", IP: "remote_addr", User: "user", Status: "status", Bytes: "size", Request: "request"},
				Decider: decider, Redis: url,
				OnDecision: func(_ Record, ok bool) { got = append(got, ok) },
			})
			if err != nil {
				t.Fatal(err)
			}
			return got, rep
		}
		local, lrep := decide(InProcess, "")
		script, srep := decide(Script, "redis://"+srv.Addr)
		if lrep.Denied == 0 || lrep.Denied == lrep.Requests {
			t.Fatalf("%s: %d of %d denied: the traffic tells nothing", text, lrep.Denied, lrep.Requests)
		}
		if len(local) != len(script) {
			t.Fatalf("%s: %d decisions in process, %d by the script", text, len(local), len(script))
		}
		for j := range local {
			if local[j] != script[j] {
				t.Fatalf("%s: request %d: in process allowed=%v, script allowed=%v", text, j, local[j], script[j])
			}
		}
		if !slices.Equal(lrep.Subjects, srep.Subjects) {
			t.Errorf("%s: subjects differ:\n in process %v\n script     %v", text, lrep.Subjects, srep.Subjects)
		}
		t.Logf("%s: %d requests, %d denied, identical", text, lrep.Requests, lrep.Denied)
	}
}

// TestScriptEmbedded replays through the engine's script on the embedded
// miniredis (windows of minutes, issue 33's exponent-form scores
// included) and requires the brute-force reference's denials; a window
// with a grain is replayed by the script automatically.
func TestScriptEmbedded(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 5))
	rs := traffic(rng, 1200, 20*time.Minute, time.Second)
	slices.SortStableFunc(rs, func(a, b req) int { return a.t.Compare(b.t) })
	logged := shuffleNear(rng, rs, 20*time.Second)
	p := writeLog(t, "access.log", logged, req.clf)
	text := "ip:5/s,20/5min,40/10min; user[bytes]:20000/100s; block:30s; count:2xx,404"
	want, _ := reference(rules.MustParse(text), logged)
	rep, err := Run(context.Background(), Config{Routes: []RouteRules{{Text: text}}, Inputs: []Input{{Name: p}}, Decider: Script})
	if err != nil {
		t.Fatal(err)
	}
	if !mapsEqual(subjectsOf(rep), want) {
		t.Errorf("subjects %v, want %v", subjectsOf(rep), want)
	}
	// A grain: decided by the script without being asked to, and noted.
	rep, err = Run(context.Background(), Config{Routes: []RouteRules{{Text: "ip:50/10min~1min"}}, Inputs: []Input{{Name: p}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Decider, "script") || rep.Denied == 0 || rep.Denied == rep.Requests {
		t.Errorf("grain: decided %s, %d of %d denied", rep.Decider, rep.Denied, rep.Requests)
	}
	if _, err := Run(context.Background(), Config{Routes: []RouteRules{{Text: "ip:50/10min~1min"}}, Inputs: []Input{{Name: p}}, Decider: InProcess}); err == nil {
		t.Error("in process with a grain: no error")
	}
}
