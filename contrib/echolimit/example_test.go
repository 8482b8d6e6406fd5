package echolimit_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/echolimit"
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

	limit, err := echolimit.New(lim, "param(id):1/min")
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.GET("/files/:id", func(c echo.Context) error { return c.String(200, "file "+c.Param("id")) }, limit)

	// param(id) counts each id on its own.
	for _, path := range []string{"/files/1", "/files/1", "/files/2"} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, w.Code)
	}
	// Output:
	// /files/1 200
	// /files/1 429
	// /files/2 200
}
