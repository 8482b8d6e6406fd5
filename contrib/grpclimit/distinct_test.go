package grpclimit_test

import (
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/contrib/grpclimit"
)

// TestDistinctRefused: gRPC refuses distinct: (a call has no URL path),
// and takes calendar windows with their zone.
func TestDistinctRefused(t *testing.T) {
	t.Parallel()
	d := offlineEngine(t)
	_, err := grpclimit.New(d, map[string]string{"/p.S/M": "user:3/min; distinct:path"})
	if err == nil || !strings.Contains(err.Error(), "distinct: is not supported for gRPC") || !strings.Contains(err.Error(), "/p.S/M") {
		t.Fatalf("New: %v; want distinct refused for /p.S/M", err)
	}
	if _, err := grpclimit.New(d, map[string]string{"/p.S/M": "user:3/calendar day; calendar:Asia/Shanghai"}); err != nil {
		t.Fatal(err)
	}
}
