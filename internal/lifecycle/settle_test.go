package lifecycle

import (
	"context"
	"reflect"
	"testing"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// TestActual: what a request of ip:5/s; user[bytes]:1Gi/d;
// user[tokens]:1M/d (estimates 100 bytes and 50 tokens) settles to, by
// what its handler reported and wrote.
func TestActual(t *testing.T) {
	t.Parallel()
	g := rules.MustParse("ip:5/s; user[bytes]:1Gi/d; user[tokens]:1M/d")
	checks := []engine.Check{{}, {Cost: 100}, {Cost: 50}}
	for _, tt := range []struct {
		name    string
		settle  map[string]Settle
		report  map[string]int64
		written int64
		want    []int64
	}{
		{"nothing settles", nil, map[string]int64{"bytes": 1}, 10, nil},
		{"nothing known", map[string]Settle{"bytes": {}}, nil, 10, nil},
		{"reported", map[string]Settle{"bytes": {}, "tokens": {}}, map[string]int64{"tokens": 7}, 10, []int64{-1, -1, 7}},
		{"written", map[string]Settle{"bytes": {Written: true}}, nil, 10, []int64{-1, 10, -1}},
		{"written unknown", map[string]Settle{"bytes": {Written: true}}, nil, -1, nil},
		{"report beats written", map[string]Settle{"bytes": {Written: true}}, map[string]int64{"bytes": 3}, 10, []int64{-1, 3, -1}},
		{"debt", map[string]Settle{"bytes": {}}, map[string]int64{"bytes": 250}, 0, []int64{-1, 250, -1}},
		{"capped debt", map[string]Settle{"bytes": {MaxDebt: 20}}, map[string]int64{"bytes": 250}, 0, []int64{-1, 120, -1}},
		{"no debt", map[string]Settle{"bytes": {MaxDebt: NoDebt}}, map[string]int64{"bytes": 250}, 0, []int64{-1, 100, -1}},
		{"ip never settles", map[string]Settle{"": {}, "1": {}}, nil, 10, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := NewPlan(g.Rules)
			p.SettleWith(tt.settle)
			ctx, rep := p.Reporting(context.Background())
			for name, n := range tt.report {
				if ok := Report(ctx, name, n); ok != hasKey(tt.settle, name) {
					t.Errorf("Report(%q) = %v", name, ok)
				}
			}
			if got := p.Actual(checks, rep, tt.written); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Actual = %v, want %v", got, tt.want)
			}
		})
	}
}

func hasKey(m map[string]Settle, k string) bool { _, ok := m[k]; return ok }

func TestSettleProblem(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		s    Settle
		ok   bool
	}{{"bytes", Settle{}, true}, {"a.b-c_1", Settle{MaxDebt: NoDebt}, true}, {"", Settle{}, false},
		{"1x", Settle{}, false}, {"a b", Settle{}, false}, {"bytes", Settle{MaxDebt: -2}, false}} {
		if got := SettleProblem(tt.name, tt.s); (got == "") != tt.ok {
			t.Errorf("SettleProblem(%q, %+v) = %q", tt.name, tt.s, got)
		}
	}
}
