package middleware

import (
	"slices"

	"github.com/slidelimit/slidelimit/internal/access"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
)

func init() {
	// The root package's throttles decide outside any handler, with the
	// hooks and limit functions of the Limiter's middleware options.
	access.MiddlewareParts = func(opts any) (hooks, limits any) {
		c := configOf(opts.([]Option))
		return c.hooks, c.limits
	}
	// Package transport configures other transports with the options they
	// share with net/http, and refuses the others.
	lifecycle.TransportOptions = func(t *lifecycle.Transport, opts any) []error {
		c := configOf(opts.([]Option))
		errs := c.shared(t)
		slices.Sort(c.httpOnly)
		for _, opt := range slices.Compact(c.httpOnly) {
			errs = append(errs, &ConfigError{Kind: kindTransport, Option: opt, Reason: opt + " is net/http's option, not for this transport"})
		}
		return errs
	}
}

// configOf applies opts to the default config.
func configOf(opts []Option) config {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// shared sets what every transport's options configure on t — policy,
// client addresses, settlements, logger and hooks — and returns the
// options' errors.
func (c *config) shared(t *lifecycle.Transport) []error {
	t.Policy, t.Settle, t.Logger, t.Hooks = c.policy, c.settle, c.logger, c.hooks
	// Every transport reports a decider that cannot finish as a
	// *ConfigError.
	t.NoFinish = noFinish()
	t.IP = lifecycle.ClientIP{Header: c.proxyHeader, V6Bits: c.ipv6Prefix}
	errs := c.errs
	var terrs []error
	t.IP.Trusted, terrs = c.trustedPrefixes()
	return append(errs, terrs...)
}
