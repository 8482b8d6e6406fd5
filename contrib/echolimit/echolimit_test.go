package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/echolimit"
	"github.com/slidelimit/slidelimit/contrib/internal/routertest"
)

func TestEcho(t *testing.T) {
	t.Parallel()
	routertest.Run(t, "GET /files/:id", func(t *testing.T, lim *slidelimit.Limiter, rules string, c *routertest.Counts) http.Handler {
		mw, err := echolimit.New(lim, rules)
		if err != nil {
			t.Fatal(err)
		}
		later := func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(e echo.Context) error { c.Later.Add(1); return next(e) }
		}
		e := echo.New()
		e.GET("/files/:id", func(e echo.Context) error {
			c.Reached.Add(1)
			return e.String(routertest.Status(e.Request()), "file "+e.Param("id"))
		}, mw, later)
		return e
	})
}
