package slidelimit_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
)

// TestNewTypedNilClient checks that a nil go-redis client in a non-nil
// interface is refused with an error instead of panicking at first use.
func TestNewTypedNilClient(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]engine.Client{
		"nil":                  nil,
		"*redis.Client":        (*redis.Client)(nil),
		"*redis.ClusterClient": (*redis.ClusterClient)(nil),
		"*redis.Ring":          (*redis.Ring)(nil),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, err := slidelimit.New(c)
			var ce *slidelimit.ConfigError
			if l != nil || !errors.As(err, &ce) || !errors.Is(err, engine.ErrInvalid) {
				t.Fatalf("New(%s) = %v, %v; want a *ConfigError matching engine.ErrInvalid", name, l, err)
			}
		})
	}
}
