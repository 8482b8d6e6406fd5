package fallback

import (
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/denials"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/rules"
)

func TestLocalEviction(t *testing.T) {
	t.Parallel()
	l := New(10)
	k := plan.NewKeyer("p:", false, nil, time.Minute)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := range 25 {
		var p plan.Plan
		r := plan.Request{Scope: "s", Checks: []plan.Check{{
			Rule:    rules.Rule{Kind: rules.User, Windows: []rules.Window{{Limit: 1, Period: time.Second}}},
			Subject: string(rune('a' + i)),
		}}}
		if err := p.Build(k, &r); err != nil {
			t.Fatal(err)
		}
		res := make([]int64, 3*len(p.Wins))
		// 100 ms apart: keys expire after 1 s.
		if st := l.Decide(&p, res, nil, true, int64(i+1), now+int64(i)*100_000, denials.New(10)); st != codec.StatusAdmitted {
			t.Fatalf("key %d denied", i)
		}
		if len(l.keys) > 10 {
			t.Fatalf("%d keys, cap 10", len(l.keys))
		}
	}
}
