package replay

import (
	"fmt"
	"strings"
	"testing"
)

// TestWholeSeconds pins what docs/replay.md says of logs whose times are
// whole seconds (the Common Log Format's): the requests of one logged
// second share one instant, so a window shorter than a second holds all of
// them, and a window of one second holds none of the second before.
func TestWholeSeconds(t *testing.T) {
	t.Parallel()
	clf := func(counts map[string]int) string {
		var b strings.Builder
		for _, sec := range []string{"01", "02"} {
			for range counts[sec] {
				fmt.Fprintf(&b, "192.0.2.1 - - [07/Dec/2026:00:00:%s +0000] \"GET /x HTTP/1.1\" 200 10\n", sec)
			}
		}
		return b.String()
	}
	denied := func(rules, log string, f Fields) int64 {
		t.Helper()
		rep, err := runText(t, Config{Routes: []RouteRules{{Text: rules}}, Inputs: []Input{{Name: "-", R: strings.NewReader(log)}}, Fields: f})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Denied
	}
	// 15 requests in one logged second against 10/500ms: 5 denied, where
	// the same 15 spread over the second (66 ms apart, as JSON lines in
	// milliseconds can say) are all admitted.
	if n := denied("ip:10/500ms", clf(map[string]int{"01": 15}), Fields{}); n != 5 {
		t.Errorf("15 in one logged second, ip:10/500ms: %d denied, want 5", n)
	}
	var spread strings.Builder
	for i := range 15 {
		fmt.Fprintf(&spread, `{"t": %d, "ip": "192.0.2.1", "request": "GET /x HTTP/1.1", "status": 200}`+"\n", 1796601601000+66*i)
	}
	f, _ := ParseFields("time=t")
	if n := denied("ip:10/500ms", spread.String(), f); n != 0 {
		t.Errorf("15 spread over a second, ip:10/500ms: %d denied, want 0", n)
	}
	// 5 in each of two logged seconds against 5/s: none denied, whatever
	// the real times within those seconds were (5 at 1.9 s and 5 at 2.1 s
	// would have met 5 denials).
	if n := denied("ip:5/s", clf(map[string]int{"01": 5, "02": 5}), Fields{}); n != 0 {
		t.Errorf("5 and 5 in two logged seconds, ip:5/s: %d denied, want 0", n)
	}
	if n := denied("ip:6/2s", clf(map[string]int{"01": 5, "02": 5}), Fields{}); n != 4 {
		t.Errorf("5 and 5 in two logged seconds, ip:6/2s: %d denied, want 4", n)
	}
}
