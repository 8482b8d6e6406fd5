package main

import (
	"strings"
	"testing"
	"time"
)

// TestReportCPUColumns checks the table's CPU columns: Redis, Go, their sum
// and the client's wake-ups, each per decision.
func TestReportCPUColumns(t *testing.T) {
	t.Parallel()
	results := []result{{
		Lib: "a", Case: "c", Callers: 8, Decisions: 1000, Allowed: 1000, Elapsed: time.Second,
		CPUOK: true, RedisCPU: 25 * time.Millisecond, SelfCPU: 16 * time.Millisecond, Wakeups: 680,
	}}
	var sb strings.Builder
	printReport(&sb, "7.0", options{duration: time.Second}, results)
	want := "| 25.0 | 16.0 | 41.0 | 0.68 |"
	if !strings.Contains(sb.String(), want) {
		t.Errorf("printReport printed\n%s\nwant a row with %q", sb.String(), want)
	}
}
