package promlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/promlimit"
)

func ExampleNew() {
	m := miniredis.NewMiniRedis() // any Redis; an embedded one keeps the example self-contained
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()

	metrics := promlimit.New()
	prometheus.MustRegister(metrics) // the one line: the default registry now serves slidelimit's metrics
	lim, err := slidelimit.New(redis.NewClient(&redis.Options{Addr: m.Addr()}), slidelimit.WithHook(metrics.Hook))
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	mux := http.NewServeMux()
	if err := lim.Handle(mux, "GET /health", http.NotFoundHandler(), "ip:1/min"); err != nil {
		panic(err)
	}
	for range 3 {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/health", nil))
	}
	fmt.Println(testutil.CollectAndCount(metrics, "slidelimit_decisions_total"), "series")
	// Output: 2 series
}
