package muxlimit_test

import (
	"net/http"
	"testing"

	"github.com/gorilla/mux"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/internal/routertest"
	"github.com/slidelimit/slidelimit/contrib/muxlimit"
)

func TestMux(t *testing.T) {
	t.Parallel()
	routertest.Run(t, "GET /files/{id}", func(t *testing.T, lim *slidelimit.Limiter, rules string, c *routertest.Counts) http.Handler {
		mw, err := muxlimit.New(lim, rules)
		if err != nil {
			t.Fatal(err)
		}
		later := func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { c.Later.Add(1); next.ServeHTTP(w, r) })
		}
		r := mux.NewRouter()
		r.Use(mw, later)
		r.HandleFunc("/files/{id}", func(w http.ResponseWriter, r *http.Request) {
			c.Reached.Add(1)
			w.WriteHeader(routertest.Status(r))
		}).Methods("GET")
		return r
	})
}
