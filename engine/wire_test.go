package engine

import (
	"context"

	"errors"
	"github.com/redis/go-redis/v9"
	"strings"
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

func TestArgv(t *testing.T) {
	t.Parallel()
	c := plannedCall(t, req(user("u", win(5, time.Second), win(50, time.Minute)), ip("i", win(3, time.Millisecond))))
	c.member = []byte("77")
	b := appendHeader(nil, 0, 1)
	b = appendOp(b, c, c.all)
	b = append(b, ']')
	// Windows of a key longest first; periods in µs.
	if got, want := string(b), `[0,1,1,"77",2,2,60000000,50,1000000,5,1,1000,3]`; got != want {
		t.Errorf("argv %s, want %s", got, want)
	}
}

func TestReadOp(t *testing.T) {
	t.Parallel()
	// One key, windows 1s/2 (first) and 100ms/5 after sorting: 1s is
	// longest.
	r := req(user("u", win(5, 100*ms), win(2, time.Second)))
	const now = 2_000_000_000_000_000 // µs
	for _, tc := range []struct {
		reply  string
		status int64
		res    []int64 // used, reset, wait per merged window
		err    string
	}{
		{reply: "2000000000 0 1 0 0", status: 1, res: []int64{0, 0, 0, 0, 0, 0}},
		{reply: "2000000000 0 1 1 1999999999500000 1 1999999999950000", status: 1, res: []int64{1, 500000, 0, 1, 50000, 0}},
		{reply: "2000000000 0 0 2 1999999999500000 1999999999600000 0", status: 0, res: []int64{2, 500000, 600000, 0, 0, 0}},
		{reply: "2000000000 0 5 0 0", status: 1}, // suffix 1
		{reply: "2000000000 0 2 0 0", status: 2}, // collision exhausted
		{reply: "2000000000 0 3 0 0", err: "bad status"},
		{reply: "2000000000 0 1 0", err: "missing separator"},
		{reply: "2000000000 0 1 1", err: "missing separator"},
		{reply: "2000000000 0 1 1 ", err: "empty number"},
		{reply: "2000000000 0 1 1x1999999999500000 0", err: "not a digit"},
		{reply: "2000000000 0 1 0 0 ", err: "trailing data"},
		{reply: "2000000000 0 1 0 0 7", err: "trailing data"},
		{reply: "2000000000 0 1 -1 0", err: "not a digit"},
		{reply: "2000000000 0 1 1 1999999998000000 0", err: "score outside"},
		// An entry after the reply's time (the server's clock went back)
		// counts and leaves the window after more than its period.
		{reply: "2000000000 0 1 1 2000000000000001 1 2000000000000001", status: 1, res: []int64{1, 1000001, 0, 1, 100001, 0}},
		{reply: "2000000000 0 1 99999999999999999999 0", err: "out of range"},
		{reply: "2000000000  0 1 0 0", err: "empty number"},
		{reply: "", err: "empty number"},
		{reply: "2000000000 0 1 1e3 0", err: "not a digit"},
	} {
		c := plannedCall(t, r)
		rd := reader{s: tc.reply}
		sec, usec := rd.int(maxTime/1e6), rd.int(999_999)
		if rd.err == nil && sec*1e6+usec != now {
			t.Fatalf("%q: time %d.%06d", tc.reply, sec, usec)
		}
		status, _ := readOp(&rd, c, c.all, now)
		err := rd.end()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.reply, err, tc.err)
			}
			continue
		}
		if err != nil || status != tc.status {
			t.Errorf("%q: status %d err %v, want %d", tc.reply, status, err, tc.status)
			continue
		}
		if tc.res != nil {
			for i, v := range tc.res {
				if c.res[i] != v {
					t.Errorf("%q: res %v, want %v", tc.reply, c.res, tc.res)
					break
				}
			}
		}
	}
}

func FuzzReply(f *testing.F) {
	f.Add("2000000000 0 1 1 1999999999500000 1 1999999999950000")
	f.Add("2000000000 0 0 2 1999999999500000 1999999999600000 0")
	f.Add("0 0 0 0 1 1 0") // an entry scored after t: reset longer than the period
	f.Fuzz(func(t *testing.T, s string) {
		c := plannedCall(t, req(user("u", win(5, 100*ms), win(2, time.Second)), ip("i", win(1, time.Second))))
		rd := reader{s: s}
		sec, usec := rd.int(maxTime/1e6), rd.int(999_999)
		readOp(&rd, c, c.all, sec*1e6+usec)
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
					t.Fatalf("%q accepted with res %v", s, c.res)
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

func TestScoreForms(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int64{
		"x 1795254872573665":      1795254872573665,
		"x 1.7e+15":               1_700_000_000_000_000,
		"x 1.795254872573665e+15": 1795254872573665,
	} {
		r := reader{s: s, i: 1}
		if got := r.scoreValue(); got != want || r.end() != nil {
			t.Errorf("%q: %d %v, want %d", s, got, r.err, want)
		}
	}
	for _, s := range []string{"x 1.5", "x -1e3", "x 1e300", "x 1e", "x "} {
		r := reader{s: s, i: 1}
		if r.scoreValue(); r.err == nil {
			t.Errorf("%q accepted", s)
		}
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
