package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/rulelimits"
)

func plannedCall(t testing.TB, r Request) *call {
	t.Helper()
	c := &call{mode: opAllow}
	if err := buildPlan(&c.plan, newKeyer(&config{prefix: "p:"}), &r); err != nil {
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
		rd := codec.Reader{V: v}
		s, u := rd.Int(codec.MaxTime/1e6), rd.Int(999_999)
		readFlatOp(&rd, c, c.all, s*1e6+u)
		if err := rd.End(); err == nil {
			// Reset and wait may exceed the period: an entry scored after t
			// (admitted before the server's clock went back) leaves the
			// window later than a period from now. A window with room may
			// leave its oldest entry unread (codec.ResetUnread).
			for j, w := range c.plan.Wins {
				used, reset, wait := c.res[3*j], c.res[3*j+1], c.res[3*j+2]
				unread := reset == codec.ResetUnread && used > 0 && used < w.Limit
				ok := used >= 0 &&
					(used == 0) == (reset == 0) && (reset >= 0 || unread) &&
					(used >= w.Limit) == (wait != 0) && wait >= 0
				if !ok {
					t.Fatalf("%v accepted with res %v", v, c.res)
				}
			}
		}
	})
}

func TestRequestValidation(t *testing.T) {
	t.Parallel()
	many := make([]Check, plan.MaxChecks+1)
	for _, tc := range []struct {
		r     Request
		check int
	}{
		{req(user("u", win(0, time.Second))), 0},
		{req(user("u", win(1, time.Second)), user("v", win(plan.MaxCountLimit+1, time.Second))), 1},
		{req(user("u", win(1, 0))), 0},
		{req(user("u", win(1, rulelimits.MaxPeriod+1))), 0},
		{Request{Checks: many}, -1},
		{Request{Checks: []Check{user("u", win(1, time.Second))}, Fail: "sideways"}, -1},
	} {
		c := plannedCall(t, Request{})
		err := buildPlan(&c.plan, newKeyer(&config{}), &tc.r)
		var re *requestError
		if !errors.As(err, &re) || re.Check != tc.check || !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err %v, want a requestError for check %d", tc.r, err, tc.check)
		}
	}
	// Duplicate checks merge: same period keeps the smaller limit; the
	// 1µs-rounding rounds up.
	c := plannedCall(t, req(user("u", win(3, time.Second), win(9, 1500*time.Nanosecond)), ip("i", win(1, time.Second)), user("u", win(2, time.Second))))
	if len(c.plan.Keys) != 2 || len(c.plan.Wins) != 3 || c.plan.Wins[0] != (plan.Window{Period: 1_000_000, Limit: 2}) || c.plan.Wins[1] != (plan.Window{Period: 2, Limit: 9}) {
		t.Errorf("merged plan: keys %v wins %v", c.plan.Keys, c.plan.Wins)
	}
	if want := []int32{0, 1, 2, 0}; len(c.plan.Origin) != 4 || c.plan.Origin[0] != want[0] || c.plan.Origin[3] != want[3] {
		t.Errorf("origin %v, want %v", c.plan.Origin, want)
	}
}

func TestFlatArgs(t *testing.T) {
	t.Parallel()
	c := plannedCall(t, req(user("u", win(5, time.Second), win(50, time.Minute)), ip("i", win(3, time.Millisecond))))
	c.member = []byte("77")
	var f codec.Args
	f.Reset(0)
	opArgs(&f, c, c.all, false)
	args := f.AppendTo(nil)
	var got []string
	for _, a := range args {
		got = append(got, a.(fmt.Stringer).String())
	}
	// t, max suffix, member, nkeys, then per key nwin, busy
	// (ceil(longest/8)) and the windows longest first, in µs.
	want := "0 32 77 2 2 7500000 60000000 50 1000000 5 1 125 1000 3"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("args %q, want %q", s, want)
	}
	// A peek sends an empty member.
	c.mode = opPeek
	f.Reset(42)
	opArgs(&f, c, c.all[:1], false)
	if s := f.AppendTo(nil)[2].(fmt.Stringer).String(); s != "" || string(f.Buf[:4]) != "4232" {
		t.Errorf("peek member %q, buf %q", s, f.Buf)
	}
}

func TestReadFlatOp(t *testing.T) {
	t.Parallel()
	r := req(user("u", win(5, 100*ms), win(2, time.Second)))
	const now = 2_000_000_000_000_000 // µs
	for _, tc := range []struct {
		reply  []int64
		status int64
		res    []int64 // used, reset, wait per merged window
		err    string
	}{
		{reply: []int64{2000000000, 0, 1, 0, 0}, status: 1, res: []int64{0, 0, 0, 0, 0, 0}},
		{reply: []int64{2000000000, 0, 1, 1, 1999999999500000, 1, 1999999999950000}, status: 1, res: []int64{1, 500000, 0, 1, 50000, 0}},
		{reply: []int64{2000000000, 0, 0, 2, 1999999999500000, 1999999999600000, 0}, status: 0, res: []int64{2, 500000, 600000, 0, 0, 0}},
		{reply: []int64{2000000000, 0, 5, 0, 0}, status: 1}, // suffix 1
		{reply: []int64{2000000000, 0, 2, 0, 0}, status: 2}, // collision exhausted
		{reply: []int64{2000000000, 0, 3, 0, 0}, err: "bad status"},
		{reply: []int64{2000000000, 0, 1, 0}, err: "missing number"},
		{reply: []int64{2000000000, 0, 1, 1}, err: "missing number"},
		{reply: []int64{2000000000, 0, 1, 0, 0, 7}, err: "trailing data"},
		{reply: []int64{2000000000, 0, 1, -1, 0}, err: "out of range"},
		{reply: []int64{2000000000, 0, 1, 1<<53 + 1, 0}, err: "out of range"},
		{reply: []int64{2000000000, 0, 1 + 4*(codec.MaxSuffix+1), 0, 0}, err: "out of range"},
		{reply: []int64{2000000000, 0, 1, 1, 1999999998000000, 0}, err: "score outside"},
		{reply: []int64{2000000000, 0, 1, 1, 2000000000000001, 1, 2000000000000001}, status: 1, res: []int64{1, 1000001, 0, 1, 100001, 0}},
		{reply: nil, err: "missing number"},
	} {
		c := plannedCall(t, r)
		rd := codec.Reader{V: tc.reply}
		sec, usec := rd.Int(codec.MaxTime/1e6), rd.Int(999_999)
		if rd.Err == nil && sec*1e6+usec != now {
			t.Fatalf("%v: time %d.%06d", tc.reply, sec, usec)
		}
		status, _ := readFlatOp(&rd, c, c.all, now)
		err := rd.End()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v, want %q", tc.reply, err, tc.err)
			}
			continue
		}
		if err != nil || status != tc.status {
			t.Errorf("%v: status %d err %v, want %d", tc.reply, status, err, tc.status)
			continue
		}
		for i, v := range tc.res {
			if c.res[i] != v {
				t.Errorf("%v: res %v, want %v", tc.reply, c.res, tc.res)
				break
			}
		}
	}
}

func TestWeightedArgs(t *testing.T) {
	t.Parallel()
	// A cost rule (cost 7) and a count rule with a grain (cost 1):
	// weighted keys, given as -nwin, busy (flat only), cost, then period,
	// limit and the tier's grain per window, longest first.
	c := plannedCall(t, req(bytesOf("u", 7, win(100, time.Second), gwin(1000, time.Minute, 10*time.Second)),
		user("u", win(5, time.Second), gwin(50, time.Hour, time.Minute))))
	c.member = []byte("77")
	var f codec.Args
	f.Reset(0)
	opArgs(&f, c, c.all, false)
	var got []string
	for _, a := range f.AppendTo(nil) {
		got = append(got, a.(fmt.Stringer).String())
	}
	want := "0 32 77 2 -2 7500000 7 60000000 1000 10000000 1000000 100 0 -2 450000000 1 3600000000 50 60000000 1000000 5 0"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("flat args %q, want %q", s, want)
	}
	// A window is full when used + cost exceeds its limit: 94 + 7 > 100.
	const now = 2_000_000_000_000_000
	rd := codec.Reader{V: []int64{2000000000, 0, 0, 500, 1999999999000001, 94, 1999999999500000, 1999999999600000, 0, 0}}
	rd.Int(codec.MaxTime / 1e6)
	rd.Int(999_999)
	if st, _ := readFlatOp(&rd, c, c.all, now); st != 0 || rd.End() != nil {
		t.Fatalf("status %d err %v", st, rd.Err)
	}
	if want := []int64{500, 59000001, 0, 94, 500000, 600000, 0, 0, 0, 0, 0, 0}; !slices.Equal(c.res, want) {
		t.Errorf("res %v, want %v", c.res, want)
	}
}

// FuzzWeightedReply reads flat replies for a weighted key of cost 7: a
// reply is accepted only when every window is consistent, with a wait
// exactly when the cost does not fit.
func FuzzWeightedReply(f *testing.F) {
	f.Add(int64(2000000000), int64(0), int64(0), int64(94), int64(1999999999500000), int64(1999999999600000), int64(0))
	f.Add(int64(2000000000), int64(0), int64(1), int64(3), int64(1999999999500000), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, sec, usec, code, used, old, edge, used2 int64) {
		c := plannedCall(t, req(bytesOf("u", 7, win(100, time.Second), gwin(1000, time.Minute, 10*time.Second))))
		v := []int64{sec, usec, code, used2}
		if used2 > 0 {
			v = append(v, old)
		}
		v = append(v, used, old, edge)
		rd := codec.Reader{V: v}
		s, u := rd.Int(codec.MaxTime/1e6), rd.Int(999_999)
		readFlatOp(&rd, c, c.all, s*1e6+u)
		if rd.End() != nil {
			return
		}
		for j, w := range c.plan.Wins {
			used, reset, wait := c.res[3*j], c.res[3*j+1], c.res[3*j+2]
			if used < 0 || (used == 0) != (reset == 0) || reset < 0 || (used+7 > w.Limit) != (wait != 0) && used > 0 || wait < 0 {
				t.Fatalf("%v accepted with res %v", v, c.res)
			}
		}
	})
}
