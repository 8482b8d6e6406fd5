package replay

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestWholeSecondTimes pins what docs/replay.md says of logs whose times
// are whole seconds (CLF): every line of a logged second is replayed at
// that second's start, so a window counts the lines of the logged seconds
// in (t - period, t]. Times with a fraction (JSON lines) keep it.
func TestWholeSecondTimes(t *testing.T) {
	t.Parallel()
	clf := func(sec, n int) string {
		var b strings.Builder
		for range n {
			fmt.Fprintf(&b, "192.0.2.1 - - [%s] \"GET / HTTP/1.1\" 200 1\n", t0.Add(time.Duration(sec)*time.Second).Format("02/Jan/2006:15:04:05 -0700"))
		}
		return b.String()
	}
	spread := func(n int, step time.Duration) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "{\"time\":%q,\"ip\":\"192.0.2.1\",\"method\":\"GET\",\"path\":\"/\",\"status\":200}\n", t0.Add(time.Duration(i)*step).Format(time.RFC3339Nano))
		}
		return b.String()
	}
	for _, c := range []struct {
		name, rules, log string
		denied           int64
	}{
		// A window under a second sees a logged second's lines at once:
		// at most its limit a second.
		{"sub-second window, whole seconds", "ip:10/100ms", clf(0, 20), 10},
		{"sub-second window, 50 ms apart", "ip:10/100ms", spread(20, 50*time.Millisecond), 0},
		// A window of whole seconds counts whole logged seconds: bursts on
		// either side of a second's start are apart.
		{"1 s window, two seconds", "ip:5/s", clf(0, 5) + clf(1, 5), 0},
		// A window of 1.5 s holds two logged seconds.
		{"1.5 s window, two seconds", "ip:5/1500ms", clf(0, 5) + clf(1, 5), 5},
	} {
		rep, err := Run(context.Background(), Config{Routes: []RouteRules{{Text: c.rules, Origin: "test"}},
			Inputs: []Input{{Name: "log", R: strings.NewReader(c.log)}}, Decider: InProcess})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if rep.Denied != c.denied {
			t.Errorf("%s: %d of %d denied, want %d", c.name, rep.Denied, rep.Requests, c.denied)
		}
	}
}
