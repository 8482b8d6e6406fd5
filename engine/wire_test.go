package engine

import (
	"context"

	"errors"
	"github.com/redis/go-redis/v9"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/rules"
)

func plannedCall(t testing.TB, r Request) *call {
	t.Helper()
	c := &call{mode: opAllow}
	if err := c.plan.build(newKeyer(&config{prefix: "p:"}), &r); err != nil {
		t.Fatal(err)
	}
	c.prepare()
	return c
}

// FuzzReply reads replies for a count key with two windows and one with
// one: a reply is accepted only when every window is consistent.
func FuzzReply(f *testing.F) {
	f.Add(int64(2000000000), int64(0), int64(1), int64(1), int64(1999999999500000), int64(0), int64(1), int64(1999999999950000), int64(0))
	f.Add(int64(2000000000), int64(0), int64(0), int64(2), int64(1999999999500000), int64(1999999999600000), int64(0), int64(0), int64(0))
	f.Add(int64(0), int64(0), int64(0), int64(1), int64(1), int64(0), int64(1), int64(1), int64(0)) // an entry scored after t: reset longer than the period
	f.Fuzz(func(t *testing.T, sec, usec, code, used, old, edge, used2, old2, used3 int64) {
		c := plannedCall(t, req(user("u", win(5, 100*ms), win(2, time.Second)), ip("i", win(1, time.Second))))
		v := []int64{sec, usec, code, used}
		if used != 0 {
			v = append(v, old)
			if used >= 2 {
				v = append(v, edge)
			}
		}
		v = append(v, used2)
		if used2 != 0 {
			v = append(v, old2)
		}
		v = append(v, used3)
		rd := ireader{v: v}
		s, u := rd.int(maxTime/1e6), rd.int(999_999)
		readFlatOp(&rd, c, c.all, s*1e6+u)
		if err := rd.end(); err == nil {
			// Reset and wait may exceed the period: an entry scored after t
			// (admitted before the server's clock went back) leaves the
			// window later than a period from now.
			for j, w := range c.plan.wins {
				used, reset, wait := c.res[3*j], c.res[3*j+1], c.res[3*j+2]
				ok := used >= 0 &&
					(used == 0) == (reset == 0) && reset >= 0 &&
					(used >= w.limit) == (wait != 0) && wait >= 0
				if !ok {
					t.Fatalf("%v accepted with res %v", v, c.res)
				}
			}
		}
	})
}

func TestRequestValidation(t *testing.T) {
	t.Parallel()
	many := make([]Check, MaxChecks+1)
	for _, tc := range []struct {
		r     Request
		check int
	}{
		{req(user("u", win(0, time.Second))), 0},
		{req(user("u", win(1, time.Second)), user("v", win(MaxCountLimit+1, time.Second))), 1},
		{req(user("u", win(1, 0))), 0},
		{req(user("u", win(1, rules.MaxPeriod+1))), 0},
		{Request{Checks: many}, -1},
		{Request{Checks: []Check{user("u", win(1, time.Second))}, Fail: "sideways"}, -1},
	} {
		c := plannedCall(t, Request{})
		err := c.plan.build(newKeyer(&config{}), &tc.r)
		var re *RequestError
		if !errors.As(err, &re) || re.Check != tc.check || !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err %v, want a RequestError for check %d", tc.r, err, tc.check)
		}
	}
	// Duplicate checks merge: same period keeps the smaller limit; the
	// 1µs-rounding rounds up.
	c := plannedCall(t, req(user("u", win(3, time.Second), win(9, 1500*time.Nanosecond)), ip("i", win(1, time.Second)), user("u", win(2, time.Second))))
	if len(c.plan.keys) != 2 || len(c.plan.wins) != 3 || c.plan.wins[0] != (window{1_000_000, 2, 0}) || c.plan.wins[1] != (window{2, 9, 0}) {
		t.Errorf("merged plan: keys %v wins %v", c.plan.keys, c.plan.wins)
	}
	if want := []int32{0, 1, 2, 0}; len(c.plan.origin) != 4 || c.plan.origin[0] != want[0] || c.plan.origin[3] != want[3] {
		t.Errorf("origin %v, want %v", c.plan.origin, want)
	}
}

// TestKeyArgPrints checks that traces and errors show keys, not pointers.
func TestKeyArgPrints(t *testing.T) {
	t.Parallel()
	c := plannedCall(t, req(user("u", win(1, time.Second))))
	cmd := redis.NewCmd(context.Background(), "evalsha", "sha", 1, &c.plan.args[0], "[]")
	if got, want := cmd.String(), "evalsha sha 1 p:{s|user|u} []"; got != want {
		t.Errorf("cmd.String() = %q, want %q", got, want)
	}
}
