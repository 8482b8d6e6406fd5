package slidelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
)

// TestThrottleDebtCapped: Finish settles a cost to at most the smallest
// limit of the rule's windows (2^52 tokens on a 90,000/min window
// would hold the key for the whole period, a calendar month's rest), and
// a negative actual keeps the estimate.
func TestThrottleDebtCapped(t *testing.T) {
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	th, err := lim.Throttle("llm", "key(k)[tokens]:90000/min,2000000/calendar month; key(k):500/min")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	used := func(key string) (minute, month int64) {
		t.Helper()
		d, err := lim.Peek(ctx, "llm", "key(k)[tokens]", key, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, ws := range d.Windows {
			if ws.Window.Calendar != "" {
				month = ws.Used
			} else {
				minute = ws.Used
			}
		}
		return minute, month
	}
	finish := func(key string, actual int64) {
		t.Helper()
		call := slidelimit.Call{Keys: map[string]string{"k": key}, Costs: map[string]int64{"tokens": 100}}
		p, err := th.Wait(ctx, call)
		if err != nil {
			t.Fatal(err)
		}
		p.Finish(map[string]int64{"tokens": actual})
	}
	settled := func(key string, actual, wantMinute, wantMonth int64) {
		t.Helper()
		finish(key, actual)
		// Finish leaves within 1 ms; a later Peek sees it once it has.
		deadline := time.Now().Add(5 * time.Second)
		for {
			minute, month := used(key)
			if minute == wantMinute && month == wantMonth {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Finish(%d) of key %s: used %d in the minute and %d in the month, want %d and %d",
					actual, key, minute, month, wantMinute, wantMonth)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	settled("huge", 1<<52, 90000, 90000)
	settled("over", 90001, 90000, 90000)
	settled("fits", 4000, 4000, 4000)
	// The estimate kept: a second call settled to 7 makes 107, not 7.
	finish("negative", -5)
	settled("negative", 7, 107, 107)
	settled("zero", 0, 0, 0)
}
