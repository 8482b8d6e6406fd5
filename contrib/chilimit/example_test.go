package chilimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/chilimit"
	"github.com/slidelimit/slidelimit/middleware"
)

func ExampleScope() {
	m := miniredis.NewMiniRedis() // any Redis; an embedded one keeps the example self-contained
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim, err := slidelimit.New(redis.NewClient(&redis.Options{Addr: m.Addr()}))
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	limit, err := lim.Middleware("ip:2/min", middleware.WithScopeFunc(chilimit.Scope))
	if err != nil {
		panic(err)
	}
	r := chi.NewRouter()
	r.With(limit).Get("/files/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "file ", r.PathValue("id")) })

	for _, path := range []string{"/files/1", "/files/2", "/files/3"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, w.Code)
	}
	// Output:
	// /files/1 200
	// /files/2 200
	// /files/3 429
}
