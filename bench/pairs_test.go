package main

import (
	"strings"
	"testing"
	"time"
)

func TestParsePairs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []pair
		err  bool
	}{
		{in: "", want: nil},
		{in: "a,b", want: []pair{{"a", "b"}}},
		{in: " redis_rate/v10 , ulule/limiter/v3 ; x,y;", want: []pair{{"redis_rate/v10", "ulule/limiter/v3"}, {"x", "y"}}},
		{in: "a", err: true},
		{in: "a,", err: true},
		{in: "a,b,c", err: true},
	} {
		got, err := parsePairs(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("parsePairs(%q) error = %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("parsePairs(%q) = %v, want %v", tc.in, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("parsePairs(%q) = %v, want %v", tc.in, got, tc.want)
			}
		}
	}
}

func TestPrintPairs(t *testing.T) {
	t.Parallel()
	run := func(lib string, round int, decisions uint64) result {
		return result{Lib: lib, Case: "c", Callers: 8, Round: round, Decisions: decisions, Elapsed: time.Second}
	}
	// Round 2's ratio is the median: 0.8, 0.9 and 1.2.
	results := []result{
		run("a", 1, 80), run("b", 1, 100),
		run("a", 2, 90), run("b", 2, 100),
		run("a", 3, 120), run("b", 3, 100),
	}
	var sb strings.Builder
	printPairs(&sb, results, []pair{{"a", "b"}})
	want := "| a ÷ b | c | 8 | 0.90 | 0.80–1.20 | 0.80 0.90 1.20 |"
	if !strings.Contains(sb.String(), want) {
		t.Errorf("printPairs printed\n%s\nwant a line %q", sb.String(), want)
	}
}

func TestPrintPairsCPU(t *testing.T) {
	t.Parallel()
	// CPU per decision, Redis and Go together: a's ÷ b's is 0.5, 0.6 and
	// 2.0 in the three rounds, so the median is 0.6. A run without CPU
	// samples (round 4) is left out.
	run := func(lib string, round int, redis, self time.Duration) result {
		return result{Lib: lib, Case: "c", Callers: 8, Round: round, Decisions: 100, Elapsed: time.Second,
			CPUOK: redis > 0, RedisCPU: redis, SelfCPU: self}
	}
	results := []result{
		run("a", 1, 300*time.Microsecond, 200*time.Microsecond), run("b", 1, 600*time.Microsecond, 400*time.Microsecond),
		run("a", 2, 600*time.Microsecond, 0), run("b", 2, 500*time.Microsecond, 500*time.Microsecond),
		run("a", 3, time.Millisecond, time.Millisecond), run("b", 3, 500*time.Microsecond, 500*time.Microsecond),
		run("a", 4, 0, 0), run("b", 4, time.Millisecond, 0),
	}
	var sb strings.Builder
	printPairs(&sb, results, []pair{{"a", "b"}})
	want := "| a ÷ b | c | 8 | 1.00 | 1.00–1.00 | 1.00 1.00 1.00 1.00 | 0.60 |"
	if !strings.Contains(sb.String(), want) {
		t.Errorf("printPairs printed\n%s\nwant a line %q", sb.String(), want)
	}
}
