package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// largeSubject returns a subject of size bytes that starts with prefix.
func largeSubject(prefix string, size int) string {
	return prefix + strings.Repeat("abcdefghijklmnopqrstuvwxyz", size/26+1)[:size-len(prefix)]
}

// TestDenialHook checks what Allow gives the denial hook (WithDenialHook;
// the root package's tallies use it): nothing for an
// admission or a fail-closed denial; a subject stored as is as is; a
// hashed subject by the stored hash of its key, with the subject to show
// when short, its first 48 bytes cut at a UTF-8 character when longer
// than 128 bytes, nothing when the check gives the hash.
func TestDenialHook(t *testing.T) {
	t.Parallel()
	_, c := redistest.StartClient(t)
	prefix := WithKeyPrefix(redistest.Prefix(t))
	long := largeSubject("user:"+strings.Repeat("é", 22), 300) // byte 48 is in the middle of an 'é'
	hashAll := newEngine(t, c, prefix, WithHashedSubjects([]byte("s")))
	plain := newEngine(t, c, prefix)
	var got []Denial
	hook := func(d Denial) {
		d.Subject, d.Shown = strings.Clone(d.Subject), strings.Clone(d.Shown)
		got = append(got, d)
	}
	hashAll.denied = hook
	plain.denied = hook
	ctx := context.Background()
	deny := func(e *Engine, r Request) Denial {
		t.Helper()
		got = nil
		for i := range 2 {
			d, err := e.Allow(ctx, r)
			if err != nil || d.Allowed != (i == 0) {
				t.Fatalf("request %d of %+v: %+v, %v", i, r, d, err)
			}
		}
		if len(got) != 1 {
			t.Fatalf("%+v: %d calls of the hook, want 1: %+v", r, len(got), got)
		}
		return got[0]
	}
	r := One("s", rules.User, "user:alice", win(1, time.Hour))
	r.Checks[0].Name, r.Checks[0].Rule.Cost = "n", ""
	if d := deny(plain, r); d != (Denial{Scope: "s", Kind: rules.User, Name: "n", Subject: "user:alice"}) {
		t.Errorf("stored as is: %+v", d)
	}
	h := string(hashAll.keyer.AppendHashed(nil, "user:alice"))
	if d := deny(hashAll, r); d != (Denial{Scope: "s", Kind: rules.User, Name: "n", Subject: h, Shown: "user:alice", Hashed: true}) {
		t.Errorf("hashed: %+v, want the hash %s", d, h)
	}
	r.Checks[0].Subject = long
	h = string(plain.keyer.AppendHashed(nil, long))
	want := Denial{Scope: "s", Kind: rules.User, Name: "n", Subject: h, Shown: long[:47], Hashed: true, Cut: true}
	if d := deny(plain, r); d != want {
		t.Errorf("long: %+v, want %+v", d, want)
	}
	r.Checks[0].Subject, r.Checks[0].Hashed = h, true
	r.Scope = "by hash"
	if d := deny(plain, r); d != (Denial{Scope: "by hash", Kind: rules.User, Name: "n", Subject: h, Hashed: true}) {
		t.Errorf("given by its hash: %+v", d)
	}
	got = nil
	fc := One("s", rules.User, "u", win(1, time.Hour))
	fc.Fail = rules.FailClosed
	closed := newEngine(t, c, prefix, WithFailMode(rules.FailClosed))
	closed.denied = hook
	closed.Close()
	if d, _ := closed.Allow(ctx, fc); d.Allowed || len(got) != 0 {
		t.Errorf("fail-closed: %+v, %d calls of the hook, want a denial and none", d, len(got))
	}
}

// TestDenialHookNoAlloc: reporting a denial of a subject stored as is to
// a hook allocates nothing, for a denial Redis made. (Measured on the
// reporting step itself: a whole Allow's count moves with the call pool,
// which under the race detector drops a random quarter of what it is
// given, and with other tests' goroutines.)
func TestDenialHookNoAlloc(t *testing.T) {
	if testing.Short() {
		t.Skip("measures allocations")
	}
	_, c := redistest.StartClient(t)
	ctx := context.Background()
	e := newEngine(t, c, WithKeyPrefix(redistest.Prefix(t)))
	var n int
	e.denied = func(Denial) { n++ }
	deny := One("s", rules.User, "d", win(1, time.Hour))
	e.Allow(ctx, deny)
	d, err := e.Allow(ctx, deny)
	if err != nil || d.Allowed || n != 1 {
		t.Fatalf("second Allow = %+v, %v with %d hook calls, want a denial reported once", d, err, n)
	}
	if got := testing.AllocsPerRun(1000, func() { e.noteDenial(&deny, &d) }); got != 0 {
		t.Errorf("reporting a denial allocates %v times", got)
	}
	if n != 1002 {
		t.Errorf("the hook was called %d times, want 1002", n)
	}
}

// TestStoredHash: the stored hash the tallies read from a plan is the one
// the keyer makes, for a check with a rate key, a cost key, a slot key
// only, and with every subject hashed; a check stored as is, or with
// calendar windows only, has none (the tallies hash it themselves).
func TestStoredHash(t *testing.T) {
	t.Parallel()
	long := largeSubject("user:", 300)
	check := func(cost string, subject string, ws ...rules.Window) Check {
		c := Check{Rule: rules.Rule{Kind: rules.User, Name: "n|}", Cost: cost, Windows: ws}, Subject: subject}
		if cost != "" {
			c.Cost = 5
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		hashAll bool
		check   Check
		want    bool
	}{
		{"rate", false, check("", long, win(1, time.Minute)), true},
		{"cost", false, check("bytes", long, win(100, time.Minute)), true},
		{"slot", false, check("", long, rules.Window{Limit: 1, Concurrent: true}), true},
		{"hash all", true, check("", "user:alice", win(1, time.Minute)), true},
		{"short", false, check("", "user:alice", win(1, time.Minute)), false},
		{"calendar", false, check("", long, rules.Window{Limit: 2, Calendar: ruletime.Month}), false},
	} {
		k := newKeyer(&config{prefix: "p}{:", hashAll: tc.hashAll})
		check := tc.check
		req := Request{Scope: "s}|#", Checks: []Check{{Rule: rules.Rule{Kind: rules.IP, Windows: []rules.Window{win(1, time.Hour)}}, Subject: "ip:1"}, check}}
		var p plan.Plan
		if err := buildPlan(&p, k, &req); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := p.StoredHash(k.Keyer, 1)
		if want := string(k.AppendHashed(nil, check.Subject)); tc.want && got != want || !tc.want && got != "" {
			t.Errorf("%s: stored hash %q, want %q (%v)", tc.name, got, want, tc.want)
		}
	}
}
