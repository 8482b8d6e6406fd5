package throttle

import (
	"log/slog"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/overrides"
	"github.com/slidelimit/slidelimit/middleware"
)

// testLimiter stands in this package's tests for the root package's
// Limiter: an engine on a client, making throttles as Limiter.Throttle
// does.
type testLimiter struct {
	eng     *engine.Engine
	client  engine.Client
	engine  []engine.Option
	hooks   []func(middleware.Event)
	maxHold time.Duration
	made    []*Throttle
}

// Option configures newLimiter, as the root package's options do.
type Option func(*testLimiter)

// WithEngineOptions passes opts to engine.New.
func WithEngineOptions(opts ...engine.Option) Option {
	return func(l *testLimiter) { l.engine = append(l.engine, opts...) }
}

// WithLogger sets the engine's logger.
func WithLogger(lg *slog.Logger) Option {
	return func(l *testLimiter) { l.engine = append(l.engine, engine.WithLogger(lg)) }
}

// WithMaxHold sets Config.MaxHold.
func WithMaxHold(d time.Duration) Option { return func(l *testLimiter) { l.maxHold = d } }

// WithHook adds a decision hook.
func WithHook(fn func(middleware.Event)) Option {
	return func(l *testLimiter) { l.hooks = append(l.hooks, fn) }
}

// newLimiter returns a testLimiter deciding with client.
func newLimiter(client engine.Client, opts ...Option) (*testLimiter, error) {
	l := &testLimiter{client: client}
	for _, o := range opts {
		o(l)
	}
	var err error
	l.eng, err = engine.New(client, l.engine...)
	return l, err
}

// Throttle returns the throttle name enforcing text.
func (l *testLimiter) Throttle(name, text string) (*Throttle, error) {
	g, err := overrides.Group(name, text)
	if err != nil {
		return nil, err
	}
	t, err := New(Config{Name: name, Engine: l.eng, Client: l.client, Hooks: l.hooks, MaxHold: l.maxHold}, g)
	if err == nil {
		l.made = append(l.made, t)
	}
	return t, err
}

// Close closes the throttles and the engine.
func (l *testLimiter) Close() error {
	for _, t := range l.made {
		t.Close()
	}
	return l.eng.Close()
}
