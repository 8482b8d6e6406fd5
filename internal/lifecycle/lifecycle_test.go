package lifecycle

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

func TestBlockAndSlots(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		text  string
		block time.Duration
		slots bool
	}{
		{"ip:5/s; block:1h", time.Hour, false},
		{"ip:5/s; block:1h; mode:shadow", 0, false},
		{"ip:5/s, 2 concurrent", 0, true},
		{"ip:5/s; role(gold)=user:1 concurrent", 0, true},
	} {
		g := rules.MustParse(tt.text)
		if b, s := Block(&g), HoldsSlots(&g); b != tt.block || s != tt.slots {
			t.Errorf("%q: Block %v, HoldsSlots %v; want %v, %v", tt.text, b, s, tt.block, tt.slots)
		}
	}
}

// steps records the steps a Decider is asked for.
type steps struct{ got []string }

func (s *steps) GiveBack(context.Context, engine.Request, engine.Decision) error {
	s.got = append(s.got, "giveback")
	return nil
}

func (s *steps) Release(context.Context, engine.Request, engine.Decision) error {
	s.got = append(s.got, "release")
	return errors.New("down")
}

func (s *steps) Settle(context.Context, engine.Request, engine.Decision, []int64) error {
	s.got = append(s.got, "settle")
	return nil
}

// finisher records the Outcomes it finishes.
type finisher struct{ got []engine.Outcome }

func (f *finisher) Finish(_ context.Context, _ engine.Decision, o engine.Outcome) error {
	f.got = append(f.got, o)
	return nil
}

// asyncFinisher records the Outcomes it is given, and fails a Finish.
type asyncFinisher struct{ finisher }

func (f *asyncFinisher) FinishAsync(_ engine.Decision, o engine.Outcome) {
	f.got = append(f.got, o)
}

func (f *asyncFinisher) Finish(context.Context, engine.Decision, engine.Outcome) error {
	return errors.New("the synchronous Finish was called")
}

// TestFinishAsync: a decider that finishes asynchronously gets one
// FinishAsync, not a Finish; a denial finishes nothing.
func TestFinishAsync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var req engine.Request
	f := &asyncFinisher{}
	o := engine.Outcome{Actual: []int64{1}}
	if err := Finish(ctx, f, &req, &engine.Decision{Allowed: true}, o); err != nil || !reflect.DeepEqual(f.got, []engine.Outcome{o}) {
		t.Errorf("AsyncFinisher: %v, %+v", err, f.got)
	}
	if err := Finish(ctx, f, &req, &engine.Decision{}, o); err != nil || len(f.got) != 1 {
		t.Errorf("a denial: %v, %+v", err, f.got)
	}
}

// TestFinish: a Finisher gets one call; a Decider without Finish gets its
// steps, a request given back is neither released nor settled; a denial
// finishes nothing.
func TestFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ok := &engine.Decision{Allowed: true}
	var req engine.Request
	f := &finisher{}
	o := engine.Outcome{GiveBack: true, Actual: []int64{1}}
	if err := Finish(ctx, f, &req, ok, o); err != nil || !reflect.DeepEqual(f.got, []engine.Outcome{o}) {
		t.Errorf("Finisher: %v, %+v", err, f.got)
	}
	for _, tt := range []struct {
		o    engine.Outcome
		want []string
		err  bool
	}{
		{engine.Outcome{}, []string{"release"}, true},
		{engine.Outcome{GiveBack: true, Actual: []int64{1}}, []string{"giveback"}, false},
		{engine.Outcome{Actual: []int64{1}}, []string{"release", "settle"}, true},
	} {
		s := &steps{}
		err := Finish(ctx, s, &req, ok, tt.o)
		if !reflect.DeepEqual(s.got, tt.want) || (err != nil) != tt.err {
			t.Errorf("Finish(%+v): steps %v, err %v; want %v, error %v", tt.o, s.got, err, tt.want, tt.err)
		}
	}
	s := &steps{}
	if err := Finish(ctx, s, &req, &engine.Decision{}, engine.Outcome{GiveBack: true}); err != nil || s.got != nil {
		t.Errorf("a denial: %v, %v", s.got, err)
	}
}

func TestClientIPSubject(t *testing.T) {
	t.Parallel()
	c := ClientIP{V6Bits: 64}
	for peer, want := range map[string]string{
		"192.0.2.7:5123":       "ip:192.0.2.7",
		"[2001:db8::1]:443":    "ip:2001:db8::/64",
		"@":                    "peer:@",
		"[::ffff:192.0.2.7]:1": "ip:192.0.2.7",
	} {
		if got := c.Subject(peer, nil); got != want {
			t.Errorf("Subject(%q) = %q, want %q", peer, got, want)
		}
	}
}
