package muxlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/gorilla/mux"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/muxlimit"
)

func ExampleNew() {
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

	limit, err := muxlimit.New(lim, "param(id):1/min")
	if err != nil {
		panic(err)
	}
	r := mux.NewRouter()
	r.Use(limit)
	r.HandleFunc("/files/{id}", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "file ", r.PathValue("id")) })

	for _, path := range []string{"/files/1", "/files/1", "/files/2"} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, w.Code)
	}
	// Output:
	// /files/1 200
	// /files/1 429
	// /files/2 200
}
