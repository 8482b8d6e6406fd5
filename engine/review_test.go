package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/rules"
)

// TestLeaderPanic checks that a batch whose run panics (a panicking
// client, hook or wrapper) neither strands the callers queued behind it nor
// leaks an in-flight slot, and that a probe that panics does not leave
// every later call on the fail mode.
func TestLeaderPanic(t *testing.T) {
	t.Parallel()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	e := newEngine(t, rc, WithFailMode(rules.FailClosed))
	e.batch.maxInflight = 1
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	panics := true
	e.batch.run = func(batch []*call) {
		if panics {
			panics = false
			entered <- struct{}{}
			<-release
			panic("boom")
		}
		for _, c := range batch {
			c.err = errors.New("no redis")
		}
	}
	r := req(user("u", win(10, time.Minute)))
	e.down.Store(true) // the first call is a probe
	leader := make(chan any)
	go func() {
		defer func() { leader <- recover() }()
		e.Allow(context.Background(), r)
	}()
	<-entered
	e.down.Store(false) // the queued calls ask Redis
	queued := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := e.Allow(context.Background(), r)
			queued <- err
		}()
	}
	for { // wait until both are queued
		e.batch.mu.Lock()
		n := len(e.batch.queue)
		e.batch.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(ms)
	}
	close(release)
	if p := <-leader; p != "boom" {
		t.Errorf("leader recovered %v, want the panic", p)
	}
	for range 2 {
		select {
		case err := <-queued:
			if !errors.Is(err, ErrBackend) {
				t.Errorf("queued call: %v, want ErrBackend", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a call queued behind a panicking batch never returned")
		}
	}
	if e.probing.Load() {
		t.Error("probing still set after the probe panicked")
	}
	e.batch.mu.Lock()
	inflight := e.batch.inflight
	e.batch.mu.Unlock()
	if inflight != 0 {
		t.Errorf("%d batches in flight after all calls returned", inflight)
	}
}
