package slidelimit_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit"
)

// TestThrottleSharesConfig: a throttle takes share(CLASS):P% statements;
// shares adding up to more than 100% are a *ConfigError at the share that
// crosses it, and a route's group with a share is a *ConfigError at the
// statement.
func TestThrottleSharesConfig(t *testing.T) {
	t.Parallel()
	lim := faceLimiter(t)
	if _, err := lim.Throttle("ok", "global:20/s; share(critical):30%; share(bulk):70%"); err != nil {
		t.Fatalf("shares adding up to 100%%: %v", err)
	}
	const over = "global:20/s; share(a):60%; share(b):50%"
	_, err := lim.Throttle("over", over)
	var ce *slidelimit.ConfigError
	if !errors.As(err, &ce) || ce.Offset != strings.Index(over, "50%") || !strings.Contains(err.Error(), "add up to 110%") {
		t.Errorf("Throttle(%q) = %v, want a *ConfigError at the second share", over, err)
	}
	const route = "ip:5/s; share(a):30%"
	err = lim.Handle(http.NewServeMux(), "GET /x", http.NotFoundHandler(), route)
	if !errors.As(err, &ce) || ce.Offset != strings.Index(route, "share") || !strings.Contains(err.Error(), "Limiter.Throttle") {
		t.Errorf("Handle with %q = %v, want a *ConfigError at the share", route, err)
	}
}
