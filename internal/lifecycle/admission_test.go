package lifecycle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"testing"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// trace is a transport, a decider and a finisher in one, recording every
// call the Admission makes into them, in order.
type trace struct {
	steps    []string
	deny     bool
	costErr  error
	finished []engine.Outcome
}

func (t *trace) FindScope() string { t.steps = append(t.steps, "scope"); return "s" }
func (t *trace) Peer() (string, HeaderValues) {
	t.steps = append(t.steps, "peer")
	return "192.0.2.7:1", nil
}
func (t *trace) Value(_ *Plan, _ int, l rules.Rule) string {
	t.steps = append(t.steps, "value "+l.ID())
	return "k"
}
func (t *trace) Cost(_ *Plan, _ int, name string) (int64, error) {
	t.steps = append(t.steps, "cost "+name)
	return 10, t.costErr
}
func (t *trace) Limits(p *Plan, _ []engine.Check) (string, error) {
	t.steps = append(t.steps, "limits")
	return p.Field, nil
}
func (t *trace) Distinct() string { t.steps = append(t.steps, "distinct"); return "" }
func (t *trace) Allow(_ context.Context, req engine.Request) (engine.Decision, error) {
	t.steps = append(t.steps, "allow")
	d := engine.Decision{Allowed: !t.deny}
	for i, c := range req.Checks {
		for _, w := range c.Windows {
			d.Windows = append(d.Windows, engine.WindowState{Check: i, Window: w, Remaining: w.Limit - 1, Reset: w.Period})
		}
	}
	if t.deny {
		d.Denied, d.RetryAfter = d.Windows[0], 1500e6
	}
	return d, nil
}
func (t *trace) FinishAsync(_ engine.Decision, o engine.Outcome) {
	t.steps = append(t.steps, "finish")
	t.finished = append(t.finished, o)
}

// deciderOnly can decide but not finish.
type deciderOnly struct{}

func (deciderOnly) Allow(context.Context, engine.Request) (engine.Decision, error) {
	return engine.Decision{Allowed: true}, nil
}

func traced(t *testing.T, text string, settle map[string]Settle) (*trace, *Rules) {
	t.Helper()
	tr := &trace{}
	tp := &Transport{Decider: tr, Settle: settle, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hooks: []func(Event){func(ev Event) { tr.steps = append(tr.steps, "event") }}}
	g := rules.MustParse(text)
	r, errs := NewRules(tp, g, nil, func(status int) bool { return status < 500 }, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return tr, r
}

// TestAdmissionStepOrder: Admit asks the transport for the scope, then
// for each rule in order its value, client address or cost, then the
// decider, then emits the event; Finish finishes once, after the handler.
// A denial, a refusal and an exempt caller stop where they are decided.
func TestAdmissionStepOrder(t *testing.T) {
	t.Parallel()
	const text = "header(X-Key):5/s; ip:10/s, 2 concurrent; user[bytes]:1k/min; exempt:ops; count:2xx,4xx"
	ctx := role.NewContext(context.Background(), role.Identity{User: "u"})
	for _, tt := range []struct {
		name   string
		ctx    context.Context
		deny   bool
		err    error
		status int
		want   []string
	}{
		{"admitted", ctx, false, nil, 0, []string{"scope", "value header(X-Key)", "peer", "cost bytes", "allow", "event", "handler", "finish"}},
		{"denied", ctx, true, nil, http.StatusTooManyRequests, []string{"scope", "value header(X-Key)", "peer", "cost bytes", "allow", "event"}},
		{"unpriced", ctx, false, errors.New("no object"), http.StatusInternalServerError, []string{"scope", "value header(X-Key)", "peer", "cost bytes", "event"}},
		{"exempt", role.NewContext(ctx, role.Identity{User: "o", Roles: []role.Role{"ops"}}), false, nil, 0, []string{"event", "handler"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr, r := traced(t, text, nil)
			tr.deny, tr.costErr = tt.deny, tt.err
			var a Admission
			v := a.Admit(tt.ctx, r, tr)
			if v.Status != tt.status {
				t.Errorf("status %d, want %d", v.Status, tt.status)
			}
			if v.Status == 0 {
				tr.steps = append(tr.steps, "handler")
			}
			a.Finish(Outcome{Status: 200})
			if !reflect.DeepEqual(tr.steps, tt.want) {
				t.Errorf("steps\n%q, want\n%q", tr.steps, tt.want)
			}
		})
	}
}

// TestFinishSeam: the one finish seam gets one FinishAsync per admitted
// request that has work after its handler, with the outcome the one
// give-back predicate and the settlement decide; a request without such
// work and a denial get none; a decider that cannot finish fails NewRules
// for each kind of work with ErrNoFinish.
func TestFinishSeam(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		text   string
		settle map[string]Settle
		report int64 // reported bytes; 0 none
		o      Outcome
		want   []engine.Outcome
	}{
		{"nothing after", "ip:5/s", nil, 0, Outcome{Status: 200}, nil},
		{"counted", "ip:5/s; count:5xx", nil, 0, Outcome{Status: 503}, []engine.Outcome{{}}},
		{"given back", "ip:5/s; count:5xx", nil, 0, Outcome{Status: 200}, []engine.Outcome{{GiveBack: true}}},
		{"unknown stays counted", "ip:5/s; count:5xx", nil, 0, Outcome{Unknown: true}, []engine.Outcome{{}}},
		{"slots", "ip:1 concurrent", nil, 0, Outcome{Status: 200}, []engine.Outcome{{}}},
		{"settled", "ip[bytes]:1k/min", map[string]Settle{"bytes": {}}, 7, Outcome{Status: 200}, []engine.Outcome{{Actual: []int64{7}}}},
		{"settled to written", "ip[bytes]:1k/min", map[string]Settle{"bytes": {Written: true}}, 0, Outcome{Status: 200, Written: 3}, []engine.Outcome{{Actual: []int64{3}}}},
		{"given back, not settled", "ip[bytes]:1k/min; count:5xx", map[string]Settle{"bytes": {}}, 7, Outcome{Status: 200}, []engine.Outcome{{GiveBack: true}}},
		{"panicked, not settled", "ip[bytes]:1k/min", map[string]Settle{"bytes": {}}, 7, Outcome{Unknown: true}, []engine.Outcome{{}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr, r := traced(t, tt.text, tt.settle)
			r.counts = nil
			if len(r.group.Count) > 0 {
				r.counts = func(status int) bool { return status >= 500 }
			}
			var a Admission
			v := a.Admit(ctx, r, tr)
			if v.Status != 0 {
				t.Fatalf("status %d", v.Status)
			}
			if tt.report > 0 && !Report(v.Context, "bytes", tt.report) {
				t.Fatal("the handler's context takes no report")
			}
			a.Finish(tt.o)
			if !reflect.DeepEqual(tr.finished, tt.want) {
				t.Errorf("finished %+v, want %+v", tr.finished, tt.want)
			}
		})
	}
	t.Run("denied", func(t *testing.T) {
		tr, r := traced(t, "ip:1 concurrent; count:5xx", nil)
		tr.deny = true
		var a Admission
		a.Admit(ctx, r, tr)
		a.Finish(Outcome{Status: 200})
		if tr.finished != nil {
			t.Errorf("a denial finished %+v", tr.finished)
		}
	})
	for _, tt := range []struct {
		text   string
		settle map[string]Settle
		want   error
	}{
		{"ip:5/s", nil, nil},
		{"ip:5/s; count:5xx", nil, ErrNoFinish},
		{"ip:5/s, 1 concurrent", nil, ErrNoFinish},
		{"ip:5/s", map[string]Settle{"bytes": {}}, ErrNoFinish},
	} {
		tp := &Transport{Decider: deciderOnly{}, Settle: tt.settle}
		_, errs := NewRules(tp, rules.MustParse(tt.text), nil, nil, nil)
		if err := errors.Join(errs...); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%q with a decider that cannot finish: %v, want %v", tt.text, err, tt.want)
		}
	}
}
