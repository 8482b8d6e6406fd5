package regions_test

import (
	"testing"

	"github.com/slidelimit/slidelimit/internal/faults"
	"github.com/slidelimit/slidelimit/internal/regions"
)

// TestBackoffIsTheModels: the fault model's regions allow for the
// replicator's longest retry pause; they must know the one it uses.
func TestBackoffIsTheModels(t *testing.T) {
	if regions.Backoff != faults.RetryBackoff {
		t.Errorf("the replicator's backoff %v, the fault model's %v", regions.Backoff, faults.RetryBackoff)
	}
}
