package middleware_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// memDecider is an in-memory exact sliding-window Decider with a manual
// clock, so middleware tests can exercise real counting without Redis. It
// records every request it is asked to decide.
type memDecider struct {
	mu    sync.Mutex
	now   time.Time
	log   map[string][]time.Time // key → admission times, oldest first
	calls []engine.Request
	fail  error          // when set, Allow fails with it
	mode  rules.FailMode // the "engine default" used when a request says FailDefault
}

func newMem() *memDecider {
	return &memDecider{now: time.Unix(1_700_000_000, 0), log: map[string][]time.Time{}, mode: rules.FailOpen}
}

func (m *memDecider) advance(d time.Duration) {
	m.mu.Lock()
	m.now = m.now.Add(d)
	m.mu.Unlock()
}

func (m *memDecider) requests() []engine.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]engine.Request(nil), m.calls...)
}

func (m *memDecider) subjects() []string {
	var s []string
	for _, r := range m.requests() {
		for _, c := range r.Checks {
			s = append(s, c.ID()+"="+c.Subject)
		}
	}
	return s
}

func key(scope string, c engine.Check, w rules.Window) string {
	return strings.Join([]string{scope, c.ID(), c.Subject, w.String()}, "\x00")
}

var errBackend = errors.New("fake: connection refused")

func (m *memDecider) Allow(ctx context.Context, req engine.Request) (engine.Decision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, req)
	now := m.now
	if m.fail != nil {
		mode := req.Fail
		if mode == rules.FailDefault {
			mode = m.mode
		}
		if mode == rules.FailClosed {
			return engine.Decision{Source: "fail-closed", Time: now}, m.fail
		}
		return engine.Decision{Allowed: true, Source: "fail-open", Time: now}, m.fail
	}
	d := engine.Decision{Allowed: true, Source: "redis", Time: now}
	var wait time.Duration
	denied := -1
	for ci, c := range req.Checks {
		for _, w := range c.Windows {
			k := key(req.Scope, c, w)
			ts := m.log[k]
			for len(ts) > 0 && !ts[0].After(now.Add(-w.Period)) {
				ts = ts[1:]
			}
			m.log[k] = ts
			ws := engine.WindowState{Check: ci, Window: w, Used: int64(len(ts))}
			if len(ts) > 0 {
				ws.Reset = ts[0].Add(w.Period).Sub(now)
			}
			if int64(len(ts)) >= w.Limit {
				d.Allowed = false
				// The request fits once the oldest entries leave until one
				// slot is free.
				free := ts[int64(len(ts))-w.Limit].Add(w.Period).Sub(now)
				if free > wait {
					wait, denied = free, len(d.Windows)
				}
			}
			d.Windows = append(d.Windows, ws)
		}
	}
	i := 0
	for _, c := range req.Checks {
		for _, w := range c.Windows {
			ws := &d.Windows[i]
			if d.Allowed {
				k := key(req.Scope, c, w)
				m.log[k] = append(m.log[k], now)
				ws.Used++
				if ws.Used == 1 {
					ws.Reset = w.Period
				}
			}
			ws.Remaining = max(0, w.Limit-ws.Used)
			i++
		}
	}
	if !d.Allowed {
		d.RetryAfter = wait
		d.Denied = d.Windows[denied]
	}
	return d, nil
}

// funcDecider returns whatever its function says, counting calls.
type funcDecider struct {
	mu    sync.Mutex
	n     int
	allow func(engine.Request) (engine.Decision, error)
}

func (f *funcDecider) Allow(_ context.Context, req engine.Request) (engine.Decision, error) {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	return f.allow(req)
}

func (f *funcDecider) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}
