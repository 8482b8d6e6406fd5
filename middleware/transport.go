package middleware

import (
	"slices"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
)

// ConfigureTransport sets on t what opts configure for every transport:
// policy, client addresses, settlements, logger, hooks and limit
// functions. It returns the options' errors, refusing net/http's own. It
// serves package transport and the root package's throttles.
func ConfigureTransport(t *lifecycle.Transport, opts ...Option) []error {
	c := configOf(opts)
	errs := c.shared(t)
	slices.Sort(c.httpOnly)
	for _, opt := range slices.Compact(c.httpOnly) {
		errs = append(errs, &ConfigError{Kind: kindTransport, Option: opt, Reason: opt + " is net/http's option, not for this transport"})
	}
	return errs
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
// client addresses, settlements, logger, hooks and limit functions — and
// returns the options' errors.
func (c *config) shared(t *lifecycle.Transport) []error {
	t.Policy, t.Settle, t.Logger, t.Hooks, t.Limits = c.policy, c.settle, c.logger, c.hooks, c.limits
	// Every transport reports a decider that cannot finish as a
	// *ConfigError.
	t.NoFinish = noFinish()
	t.IP = lifecycle.ClientIP{Header: c.proxyHeader, V6Bits: c.ipv6Prefix}
	errs := c.errs
	var terrs []error
	t.IP.Trusted, terrs = c.trustedPrefixes()
	return append(errs, terrs...)
}
