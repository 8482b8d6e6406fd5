package plan

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/rules"
)

// TestKeyArgPrints checks that traces and errors show keys, not pointers.
func TestKeyArgPrints(t *testing.T) {
	t.Parallel()
	var p Plan
	r := Request{Scope: "s", Checks: []Check{{
		Rule:    rules.Rule{Kind: rules.User, Windows: []rules.Window{{Limit: 1, Period: time.Second}}},
		Subject: "u",
	}}}
	if err := p.Build(NewKeyer("p:", false, nil, time.Minute), &r); err != nil {
		t.Fatal(err)
	}
	p.KeyArgs()
	cmd := redis.NewCmd(context.Background(), "evalsha", "sha", 1, &p.args[0], "[]")
	if got, want := cmd.String(), "evalsha sha 1 p:{s|user|u} []"; got != want {
		t.Errorf("cmd.String() = %q, want %q", got, want)
	}
}

func TestNestGrains(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want []int64 // grains, longest window first
	}{
		// An exact short window keeps tier 1 exact; the tiers beyond it
		// only see the longer windows.
		{[]int64{900, 0, 0}, []int64{900, 0, 0}},
		{[]int64{900, 60, 0}, []int64{900, 60, 0}},
		// Nested: a multiple of the next shorter tier's grain.
		{[]int64{900, 70, 0}, []int64{840, 70, 0}},
		{[]int64{900, 70, 30}, []int64{900, 60, 30}},
		{[]int64{1000, 300, 70}, []int64{840, 280, 70}},
		// A tier is no coarser than a longer window the entry is in.
		{[]int64{60, 900, 0}, []int64{60, 60, 0}},
		{[]int64{60, 900, 45}, []int64{45, 45, 45}},
	} {
		ws := make([]Window, len(tc.in))
		for i, g := range tc.in {
			ws[i] = Window{Period: int64(10000 - i), Limit: 1, Grain: g}
		}
		NestGrains(ws)
		for i := range ws {
			if ws[i].Grain != tc.want[i] {
				t.Errorf("nestGrains(%v) = %v, want %v", tc.in, ws, tc.want)
				break
			}
		}
	}
}
