package testutil

import (
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// NewEngine returns an engine on c, closed when the test ends. Its timeout
// is 5 s unless opts set one: the default suits production, and a healthy
// Redis can take longer under -race on a busy machine.
func NewEngine(tb testing.TB, c engine.Client, opts ...engine.Option) *engine.Engine {
	tb.Helper()
	opts = append([]engine.Option{engine.WithTimeout(5 * time.Second)}, opts...)
	e, err := engine.New(c, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}
