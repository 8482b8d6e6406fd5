package chilimit_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/chilimit"
	"github.com/slidelimit/slidelimit/contrib/internal/routertest"
	"github.com/slidelimit/slidelimit/middleware"
)

func TestChi(t *testing.T) {
	t.Parallel()
	routertest.Run(t, "GET /files/{id}", func(t *testing.T, lim *slidelimit.Limiter, rules string, c *routertest.Counts) http.Handler {
		mw, err := lim.Middleware(rules, middleware.WithScopeFunc(chilimit.Scope))
		if err != nil {
			t.Fatal(err)
		}
		later := func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.Later.Add(1); next.ServeHTTP(w, r) })
		}
		r := chi.NewRouter()
		r.With(mw, later).Get("/files/{id}", func(w http.ResponseWriter, r *http.Request) {
			c.Reached.Add(1)
			w.WriteHeader(routertest.Status(r))
		})
		return r
	})
}
