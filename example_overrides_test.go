package slidelimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
)

func ExampleLimiter_SetRules() {
	mr, err := miniredis.Run() // an in-process Redis for the example; use your own
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	lim, err := slidelimit.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	mux := http.NewServeMux()
	search := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if err := lim.Handle(mux, "GET /search", search, "ip:100/min"); err != nil {
		log.Fatal(err)
	}
	get := func() int {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", "/search", nil))
		return w.Code
	}
	ctx := context.Background()

	fmt.Println(get(), get(), get())
	// During an incident: 2 a minute, in every process sharing the Redis.
	// The 3 requests already counted count under the new rule.
	if err := lim.SetRules(ctx, "GET /search", "ip:2/min"); err != nil {
		log.Fatal(err)
	}
	fmt.Println(get())
	fmt.Println(lim.SetRules(ctx, "GET /search", "ip:2/fortnight"))
	// Back to the code's rules.
	if err := lim.SetRules(ctx, "GET /search", ""); err != nil {
		log.Fatal(err)
	}
	fmt.Println(get())
	// Output:
	// 200 200 200
	// 429
	// slidelimit: route "GET /search": rules: "ip:2/fortnight": unknown unit "fortnight" at offset 5
	// 200
}
