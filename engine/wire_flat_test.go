package engine

import (
	"strings"
	"testing"
	"time"
)

func TestFlatArgs(t *testing.T) {
	t.Parallel()
	c := plannedCall(t, req(user("u", win(5, time.Second), win(50, time.Minute)), ip("i", win(3, time.Millisecond))))
	c.member = []byte("77")
	var f flatArgs
	f.reset(0)
	f.op(c, c.all)
	args := f.appendTo(nil)
	var got []string
	for _, a := range args {
		got = append(got, a.(*bufArg).String())
	}
	// t, member, nkeys, then per key nwin, busy (ceil(longest/8)) and the
	// windows longest first, in µs.
	want := "0 77 2 2 7500000 60000000 50 1000000 5 1 125 1000 3"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("args %q, want %q", s, want)
	}
	// A peek sends an empty member.
	c.mode = opPeek
	f.reset(42)
	f.op(c, c.all[:1])
	if s := f.appendTo(nil)[1].(*bufArg).String(); s != "" || string(f.buf[:2]) != "42" {
		t.Errorf("peek member %q, buf %q", s, f.buf)
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
		{reply: []int64{2000000000, 0, 1, 1, 1999999998000000, 0}, err: "score outside"},
		{reply: []int64{2000000000, 0, 1, 1, 2000000000000001, 1, 2000000000000001}, status: 1, res: []int64{1, 1000001, 0, 1, 100001, 0}},
		{reply: nil, err: "missing number"},
	} {
		c := plannedCall(t, r)
		rd := ireader{v: tc.reply}
		sec, usec := rd.int(maxTime/1e6), rd.int(999_999)
		if rd.err == nil && sec*1e6+usec != now {
			t.Fatalf("%v: time %d.%06d", tc.reply, sec, usec)
		}
		status, _ := readFlatOp(&rd, c, c.all, now)
		err := rd.end()
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
