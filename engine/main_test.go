package engine

import (
	"os"
	"testing"
)

// TestMain runs the test binary as the child process of
// TestSlotsKilledHolder when asked to, and the tests otherwise.
func TestMain(m *testing.M) {
	if spec := os.Getenv(slotChildEnv); spec != "" {
		os.Exit(slotChild(spec))
	}
	os.Exit(m.Run())
}
