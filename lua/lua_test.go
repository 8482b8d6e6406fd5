package lua

import (
	"strings"
	"testing"
)

func TestEmbedded(t *testing.T) {
	if !strings.Contains(MultiWindow, "\n-- multi_window.lua") || !strings.Contains(MultiWindow, "\nreturn reply\n") {
		t.Fatalf("MultiWindow does not hold the script: %.60q", MultiWindow)
	}
}

func TestEmbeddedRenew(t *testing.T) {
	if !strings.Contains(Renew, "\n-- renew.lua") || !strings.Contains(Renew, "return reply") {
		t.Fatalf("Renew does not hold the script: %.60q", Renew)
	}
}

func TestNumberPrecedesScripts(t *testing.T) {
	for name, src := range map[string]string{"MultiWindow": MultiWindow, "Renew": Renew} {
		if !strings.HasPrefix(src, "-- number.lua") {
			t.Errorf("%s does not start with number.lua: %.60q", name, src)
		}
	}
}

func TestEmbeddedRules(t *testing.T) {
	for name, src := range map[string]string{"SetRules": SetRules, "LoadRules": LoadRules} {
		if !strings.HasPrefix(src, "-- ") || !strings.Contains(src, "KEYS[2]") {
			t.Errorf("%s does not hold its script: %.60q", name, src)
		}
	}
}
