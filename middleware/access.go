package middleware

import "github.com/slidelimit/slidelimit/internal/access"

func init() {
	// The root package's throttles decide outside any handler, with the
	// hooks and limit functions of the Limiter's middleware options.
	access.MiddlewareParts = func(opts any) (hooks, limits any) {
		c := defaultConfig()
		for _, o := range opts.([]Option) {
			if o != nil {
				o(&c)
			}
		}
		return c.hooks, c.limits
	}
}
