package main

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestParseSpec(t *testing.T) {
	spec, err := parseSpec("critical:1:2s,batch:3", 8, 3, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := encodeSpec(spec), "critical/t0/10/2s,critical/t1/1/2s,critical/t2/1/2s,batch/t0/30/0s,batch/t1/3/0s,batch/t2/3/0s"; got != want {
		t.Errorf("spec %s, want %s", got, want)
	}
	if got := encodeSpec(decodeSpec(encodeSpec(spec))); got != encodeSpec(spec) {
		t.Errorf("decodeSpec(encodeSpec) = %s", got)
	}
	if spec, _ := parseSpec("", 8, 0, 1); encodeSpec(spec) != "//8/0s" {
		t.Errorf("no classes, no tenants: %s", encodeSpec(spec))
	}
	for _, bad := range []string{"critical", "critical:0", ":3", "a:1:x", "a:1:2s:3"} {
		if _, err := parseSpec(bad, 8, 0, 1); err == nil {
			t.Errorf("parseSpec(%q) passed", bad)
		}
	}
}

func TestJain(t *testing.T) {
	if j := jain([]float64{5, 5, 5, 5}); j != 1 {
		t.Errorf("equal shares: %v, want 1", j)
	}
	if j := jain([]float64{10, 0, 0, 0, 0}); math.Abs(j-0.2) > 1e-9 {
		t.Errorf("one has all of 5: %v, want 1/5", j)
	}
}

func TestMostIn(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	if n := mostIn(at(900, 0, 500, 1000, 1500), time.Second); n != 3 {
		t.Errorf("mostIn = %d, want 3 (500, 900, 1000, as 0, 500, 900 and 900, 1000, 1500)", n)
	}
}

// The upstream limits each key on its own, and its block of k0 answers
// every call on k0 429 until it ends, noting which process sent each.
func TestUpstreamKeysAndBlock(t *testing.T) {
	now := time.Now()
	u := &upstream{limit: 2, period: time.Hour, blockAt: now.Add(time.Hour), blockD: 60}
	call := func(key string, proc int, at time.Time) int {
		status, _, _ := u.count(&arrival{at: at, key: key, proc: proc})
		return status
	}
	for i, want := range []int{200, 200, 429} {
		if got := call("k0", 0, now); got != want {
			t.Errorf("k0 call %d: %d, want %d", i, got, want)
		}
	}
	if got := call("k1", 0, now); got != http.StatusOK {
		t.Errorf("k1: %d, want 200 (a limit of its own)", got)
	}
	later := now.Add(time.Hour)
	if got := call("k0", 1, later); got != http.StatusTooManyRequests || u.block.proc != 1 {
		t.Errorf("k0 after the block began: %d by process %d, want 429 to process 1", got, u.block.proc)
	}
	call("k0", 2, later.Add(time.Second))
	if a := u.arrivals[len(u.arrivals)-1]; !a.blocked || !a.other {
		t.Errorf("another process's call during the block: %+v, want blocked and other", a)
	}
	if u.refused != 1 || len(u.accepted) != 3 {
		t.Errorf("refused %d, accepted %d; want 1 (the limit's, not the block's) and 3", u.refused, len(u.accepted))
	}
}
