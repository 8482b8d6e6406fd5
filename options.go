package slidelimit

import (
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// Option configures New. The Limiter passes engine options to [engine.New]
// and middleware options to every [middleware.New] it calls, so each
// setting is configured one way, with the option of the package that owns
// it; its only settings of its own are WithRulesCheck, WithTallyFlush and
// WithMaskedSubjects:
//
//	lim, err := slidelimit.New(rdb,
//		slidelimit.WithEngineOptions(engine.WithTimeout(50*time.Millisecond)),
//		slidelimit.WithMiddlewareOptions(middleware.WithTrustedProxies("10.0.0.0/8")),
//	)
type Option func(*config)

type config struct {
	engine     []engine.Option
	middleware []middleware.Option
	rulesCheck time.Duration
	tallyFlush time.Duration
	masked     []rules.Kind
	maskSet    bool
}

// WithMaskedSubjects sets the kinds of limiters whose subjects the
// operator's page (AdminHandler) masks: it never shows, sends or logs
// them, on the page, in its forms, in its JSON API or in its reset log
// line, but by a fingerprint ("~" and 12 characters of a SHA-256 of the
// stored subject, the same in every process), and it lifts a block or
// resets such a subject by that fingerprint. The default masks rules.Header
// (header(X-Api-Key) values are API keys); WithMaskedSubjects() with no
// kind shows every subject, and WithMaskedSubjects(rules.Header,
// rules.Key) masks key(name) values too. The kinds are rules.IP,
// rules.User, rules.Header, rules.Param and rules.Key; New fails for
// another. A subject stored hashed (engine.WithHashSubjects, or longer
// than 128 bytes) stays masked: the page never shows the value a process
// remembers of it either. A subject the operator searches for by value is
// echoed in the search box, as typed.
func WithMaskedSubjects(kinds ...rules.Kind) Option {
	return func(c *config) {
		c.masked, c.maskSet = append([]rules.Kind(nil), kinds...), true
	}
}

// WithRulesCheck sets how often the Limiter reads the version of the rule
// overrides in Redis (see Limiter.SetRules), to catch a change whose
// pub/sub message it missed; the default is DefaultRulesCheck (1 s). It is
// one GET per interval per process, off the request path. d <= 0 turns
// overrides off: the Limiter neither reads nor follows them and enforces
// the groups of its code only, and SetRules, ClearRules and Rules fail
// with ErrOverridesOff.
func WithRulesCheck(d time.Duration) Option {
	return func(c *config) { c.rulesCheck = d }
}

// WithTallyFlush sets how often the Limiter writes its denial tallies to
// Redis, where AdminHandler reads every process's (see docs/operations.md,
// Denial tallies); the default is 1 s, one pipeline per interval per
// process, off the request path. d must be between 10 ms and 10 s (New
// fails otherwise); d <= 0 turns the tallies off: the Limiter counts no
// denial, and its page shows only other processes' tallies.
func WithTallyFlush(d time.Duration) Option {
	return func(c *config) { c.tallyFlush = d }
}

// WithEngineOptions passes opts to [engine.New], which creates the
// Limiter's engine: the Redis key prefix, the timeout, the fail mode of
// groups without a fail: statement, the logger of Redis errors, and the
// other [engine.Option] settings. Later options win, as in engine.New.
func WithEngineOptions(opts ...engine.Option) Option {
	return func(c *config) { c.engine = append(c.engine, opts...) }
}

// WithMiddlewareOptions adds opts to the options of every middleware the
// Limiter builds, before the options of a Limiter.Middleware call: trusted
// proxies, key and cost functions, the role policy, hooks, the denied
// handler, the logger of request errors, and the other [middleware.Option]
// settings. Limiter.Peek and Limiter.Reset map subjects with them too.
func WithMiddlewareOptions(opts ...middleware.Option) Option {
	return func(c *config) { c.middleware = append(c.middleware, opts...) }
}
