package lua

import (
	"strings"
	"testing"
)

func TestEmbedded(t *testing.T) {
	if !strings.HasPrefix(MultiWindow, "-- multi_window.lua") || !strings.Contains(MultiWindow, "\nreturn reply\n") {
		t.Fatalf("MultiWindow does not hold the script: %.60q", MultiWindow)
	}
}

func TestEmbeddedRenew(t *testing.T) {
	if !strings.HasPrefix(Renew, "-- renew.lua") || !strings.Contains(Renew, "return reply") {
		t.Fatalf("Renew does not hold the script: %.60q", Renew)
	}
}
