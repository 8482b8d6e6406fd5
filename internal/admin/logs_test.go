package admin_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/internal/admin"
	"github.com/slidelimit/slidelimit/internal/testutil"
)

// TestStoreFailureLoggedOnce: in an outage every view fails, and the
// handler logged a warning per request (and per part of the page); it
// logs one line per 10 s whatever the requests.
func TestStoreFailureLoggedOnce(t *testing.T) {
	t.Parallel()
	logs := &testutil.LogBuffer{}
	h := admin.New(&fake{err: errors.New("dial tcp: connection refused")}, admin.Config{Log: slog.New(slog.NewTextHandler(logs, nil))}, "ops")
	for range 20 {
		for _, target := range []string{"/api/top", "/api/blocks", "/api/subject?subject=a", "/"} {
			serve(h, "GET", target)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings for 80 failed views, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("the failure's cause was not logged: %s", logs.String())
	}
}
