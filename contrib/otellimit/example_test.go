package otellimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/otellimit"
)

func ExampleNew() {
	m := miniredis.NewMiniRedis() // any Redis; an embedded one keeps the example self-contained
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()

	reader := sdkmetric.NewManualReader() // in production: otel.GetMeterProvider() with an exporter
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	metrics, err := otellimit.New(mp)
	if err != nil {
		panic(err)
	}
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

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, mt := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := mt.Data.(metricdata.Sum[int64]); ok && mt.Name == "slidelimit.decisions" {
			for _, dp := range sum.DataPoints {
				outcome, _ := dp.Attributes.Value("slidelimit.outcome")
				fmt.Println(outcome.AsString(), dp.Value)
			}
		}
	}
	// Unordered output:
	// allowed 1
	// denied 2
}
