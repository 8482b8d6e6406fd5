package lua

import (
	"strings"
	"testing"
)

func TestEmbedded(t *testing.T) {
	if !strings.HasPrefix(MultiWindow, "-- multi_window.lua") || !strings.Contains(MultiWindow, "return table.concat(out, ' ')") {
		t.Fatalf("MultiWindow does not hold the script: %.60q", MultiWindow)
	}
}
