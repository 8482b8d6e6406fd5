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

func TestEmbeddedGiveBack(t *testing.T) {
	if !strings.Contains(GiveBack, "\n-- give_back.lua") || !strings.Contains(GiveBack, "return 0") {
		t.Fatalf("GiveBack does not hold the script: %.60q", GiveBack)
	}
}

func TestEmbeddedRenew(t *testing.T) {
	if !strings.HasPrefix(Renew, "-- renew.lua") || !strings.Contains(Renew, "return reply") {
		t.Fatalf("Renew does not hold the script: %.60q", Renew)
	}
}

func TestNumberPrecedesScripts(t *testing.T) {
	for name, src := range map[string]string{"MultiWindow": MultiWindow, "GiveBack": GiveBack} {
		if !strings.HasPrefix(src, "-- number.lua") {
			t.Errorf("%s does not start with number.lua: %.60q", name, src)
		}
	}
}
