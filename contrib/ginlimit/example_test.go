package ginlimit_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/ginlimit"
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

	limit, err := ginlimit.New(lim, "ip:2/min")
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/files/:id", limit, func(c *gin.Context) { c.String(200, "file "+c.Param("id")) })

	// Every path of the route shares the route's windows.
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
