package ginlimit_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/ginlimit"
	"github.com/slidelimit/slidelimit/contrib/internal/routertest"
)

func init() { gin.SetMode(gin.ReleaseMode) }

func TestGin(t *testing.T) {
	t.Parallel()
	routertest.Run(t, "GET /files/:id", func(t *testing.T, lim *slidelimit.Limiter, rules string, c *routertest.Counts) http.Handler {
		mw, err := ginlimit.New(lim, rules)
		if err != nil {
			t.Fatal(err)
		}
		r := gin.New()
		r.GET("/files/:id", mw, func(g *gin.Context) { c.Later.Add(1); g.Next() }, func(g *gin.Context) {
			c.Reached.Add(1)
			g.String(routertest.Status(g.Request), "file %s", g.Param("id"))
		})
		return r
	})
}
