package slidelimit_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// throttleLimiter returns a Limiter on client under prefix for the
// throttle tests.
func throttleLimiter(t *testing.T, client engine.Client, prefix string, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	opts = append([]slidelimit.Option{
		slidelimit.WithEngineOptions(engine.WithKeyPrefix(prefix), engine.WithTimeout(2*time.Second)),
	}, opts...)
	lim, err := slidelimit.New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

func miniClient(t *testing.T) *redis.Client {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// globalUsed returns what the global windows of throttle name hold.
func globalUsed(t *testing.T, lim *slidelimit.Limiter, name string, ws ...rules.Window) int64 {
	t.Helper()
	d, err := enginePeek(engineOf(lim), context.Background(), engine.One(name, rules.Global, "global", ws...))
	if err != nil {
		t.Fatal(err)
	}
	return d.Windows[0].Used
}

func TestThrottleRefusedStatements(t *testing.T) {
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	for _, tc := range []struct{ rules, want string }{
		{"ip:10/min", "limiter ip"},
		{"user:10/min", "limiter user"},
		{"header(X-Key):10/min", "limiter header(X-Key)"},
		{"global:10/min; role(admin)=global:20/min", "role(admin)"},
		{"global:10/min; exempt:admin", "exempt:admin"},
		{"global:10/min; count:2xx", "count:2xx"},
		{"global:10/min; mode:shadow", "mode:shadow"},
	} {
		_, err := lim.Throttle("api", tc.rules)
		var ce *slidelimit.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "not allowed in a throttle") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Throttle(%q) = %v, want a *ConfigError naming %q", tc.rules, err, tc.want)
		}
	}
	if _, err := lim.Throttle("api", "global:10/min; scope:other"); err == nil {
		t.Error("a scope: statement naming another scope was accepted")
	}
	if _, err := lim.Throttle("api", "key(k)[tokens]:100/min,5000/calendar day; global:3 concurrent; block:1s"); err != nil {
		t.Errorf("a valid group was refused: %v", err)
	}
}

func TestThrottleCallErrors(t *testing.T) {
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	th, err := lim.Throttle("api", "key(apikey):10/min; key(apikey)[tokens]:1000/min")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []slidelimit.Call{
		{},
		{Keys: map[string]string{"apikey": "a"}},
		{Keys: map[string]string{"apikey": "a"}, Costs: map[string]int64{"tokens": 0}},
		{Keys: map[string]string{"other": "a"}, Costs: map[string]int64{"tokens": 5}},
	} {
		if _, err := th.Wait(ctx, c); !isKind(err, "call") {
			t.Errorf("Wait(%+v) = %v, want a ConfigError of kind call", c, err)
		}
	}
	p, err := th.Wait(ctx, slidelimit.Call{Keys: map[string]string{"apikey": "a"}, Costs: map[string]int64{"tokens": 5}})
	if err != nil {
		t.Fatal(err)
	}
	p.Finish(nil)
}

func TestThrottleNeverFits(t *testing.T) {
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	th, err := lim.Throttle("llm", "global[tokens]:1000/min")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = th.Wait(ctx, slidelimit.Call{Costs: map[string]int64{"tokens": 1001}})
	if !isKind(err, "never-fits") || !strings.Contains(err.Error(), "1001") {
		t.Fatalf("Wait = %v, want a never-fits ConfigError naming the cost", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Wait took %v to fail", took)
	}
	if _, _, err := th.Allow(ctx, slidelimit.Call{Costs: map[string]int64{"tokens": 1001}}); !isKind(err, "never-fits") {
		t.Errorf("Allow = %v, want a never-fits ConfigError", err)
	}
	if p, err := th.Wait(ctx, slidelimit.Call{Costs: map[string]int64{"tokens": 1000}}); err != nil {
		t.Errorf("a call of the whole limit: %v", err)
	} else {
		p.Finish(nil)
	}
}

func TestThrottleCancelCountsNothing(t *testing.T) {
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	th, err := lim.Throttle("api", "global:2/min")
	if err != nil {
		t.Fatal(err)
	}
	w := rules.Window{Limit: 2, Period: time.Minute}
	for range 2 {
		if _, err := th.Wait(context.Background(), slidelimit.Call{}); err != nil {
			t.Fatal(err)
		}
	}
	// Several callers wait, one behind the other, and all give up.
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := th.Wait(ctx, slidelimit.Call{})
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait = %v, want context.DeadlineExceeded", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := th.Wait(ctx, slidelimit.Call{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with a canceled context = %v", err)
	}
	if used := globalUsed(t, lim, "api", w); used != 2 {
		t.Errorf("the windows hold %d calls, want the 2 admitted", used)
	}
	if s := th.Stats(); s.Waiting != 0 {
		t.Errorf("%d callers still waiting", s.Waiting)
	}
}

func TestThrottleAllowAndSettle(t *testing.T) {
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	th, err := lim.Throttle("llm", "global[tokens]:100/min")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := slidelimit.Call{Costs: map[string]int64{"tokens": 60}}
	p, ok, err := th.Allow(ctx, call)
	if err != nil || !ok {
		t.Fatalf("Allow = %v, %v", ok, err)
	}
	if _, ok, _ := th.Allow(ctx, call); ok {
		t.Fatal("a second call of 60 was admitted under 100")
	}
	p.Finish(map[string]int64{"tokens": 10, "other": 5})
	w := rules.Window{Limit: 100, Period: time.Minute}
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := enginePeek(engineOf(lim), ctx, engine.Request{Scope: "llm", Checks: []engine.Check{{
			Rule: rules.Rule{Kind: rules.Global, Cost: "tokens", Windows: []rules.Window{w}}, Subject: "global", Cost: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Windows[0].Used == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the window holds %d tokens, want 10 after Finish", d.Windows[0].Used)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok, _ := th.Allow(ctx, call); !ok {
		t.Error("a call of 60 was refused after the first settled to 10")
	}
}

func TestThrottleOverrides(t *testing.T) {
	client := miniClient(t)
	prefix := randomPrefix(t)
	lim := throttleLimiter(t, client, prefix)
	other := throttleLimiter(t, client, prefix)
	th, err := lim.Throttle("api", "global:1/min")
	if err != nil {
		t.Fatal(err)
	}
	th2, err := other.Throttle("api", "global:1/min")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, ok, _ := th.Allow(ctx, slidelimit.Call{}); !ok {
		t.Fatal("first call refused")
	}
	if _, ok, _ := th.Allow(ctx, slidelimit.Call{}); ok {
		t.Fatal("second call admitted under global:1/min")
	}
	var ce *slidelimit.ConfigError
	if err := lim.SetRules(ctx, "api", "ip:5/min"); !errors.As(err, &ce) || !strings.Contains(err.Error(), "not allowed in a throttle") {
		t.Errorf("SetRules with an ip limiter = %v, want a *ConfigError for the statement", err)
	}
	if err := lim.SetRules(ctx, "api", "global:3/min"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := th.Allow(ctx, slidelimit.Call{}); !ok {
		t.Error("the override to 3/min did not apply here")
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(th2.Stats().Rules, "3/min") {
		if time.Now().After(deadline) {
			t.Fatalf("the other process still enforces %q", th2.Stats().Rules)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok, _ := th2.Allow(ctx, slidelimit.Call{}); !ok {
		t.Error("the override to 3/min did not apply in the other process")
	}
	if _, ok, _ := th2.Allow(ctx, slidelimit.Call{}); ok {
		t.Error("a fourth call admitted under the override's 3/min")
	}
	if err := lim.SetRules(ctx, "api", ""); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := th.Allow(ctx, slidelimit.Call{}); ok {
		t.Error("a call admitted after clearing brought back 1/min")
	}
}

// TestThrottleCancelAtAdmission: a context that ends while Redis admits
// the call (here: in the decision hook) makes Wait return ctx.Err() with
// the call taken back out of the windows.
func TestThrottleCancelAtAdmission(t *testing.T) {
	var cancelNow atomic.Pointer[context.CancelFunc]
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t), slidelimit.WithHook(func(e middleware.Event) {
		if c := cancelNow.Load(); c != nil && e.Allowed {
			(*c)()
		}
	}))
	th, err := lim.Throttle("api", "global:5/min")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cancelNow.Store(&cancel)
	if p, err := th.Wait(ctx, slidelimit.Call{}); !errors.Is(err, context.Canceled) || p != nil {
		t.Fatalf("Wait = %v, %v; want context.Canceled", p, err)
	}
	if used := globalUsed(t, lim, "api", rules.Window{Limit: 5, Period: time.Minute}); used != 0 {
		t.Errorf("the windows hold %d calls after a canceled Wait, want 0", used)
	}
}

// enginePeek is the engine's Peek.
func enginePeek(e *engine.Engine, ctx context.Context, req engine.Request) (engine.Decision, error) {
	return e.Peek(ctx, req)
}
