// Package embedded runs the embedded store: a miniredis in this process
// whose keys expire with the real clock, as on Redis.
//
// miniredis counts a key's time to live down only when told to
// (Miniredis.FastForward); its TIME follows the real clock. A Store tells
// it every Tick how much real time passed, so an expiry set through
// PEXPIRE or SET PX happens within Tick of its time. (miniredis's own
// ClockTTL would be exact, but it sweeps every key on every command.)
package embedded

import (
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Tick is how often a Store passes the real time to its miniredis. A key
// set between two passes has the whole interval counted at the next, so
// an expiry happens up to one interval early or late. A pass sweeps every
// key (miniredis sorts them) with the store locked: when one takes d, the
// next waits at least sweepShare*d, so sweeping takes at most
// 1/sweepShare of a core, and the interval, hence the error, grows with
// the number of keys (docs/engine.md has the measurements).
const Tick = 10 * time.Millisecond

// sweepShare bounds the part of the time spent sweeping: a pass that
// took d waits at least sweepShare*d before the next.
const sweepShare = 20

// Store is an embedded miniredis whose keys expire with the real clock.
type Store struct {
	m    *miniredis.Miniredis
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Start runs a Store on a free loopback port.
func Start() (*Store, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	s := &Store{m: m, stop: make(chan struct{}), done: make(chan struct{})}
	go s.run()
	return s, nil
}

// Addr is the address the Store listens on, host:port.
func (s *Store) Addr() string { return s.m.Addr() }

// Close stops the Store's clock and its server; connections to it are
// refused afterwards. Close may be called more than once.
func (s *Store) Close() {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.m.Close()
	})
}

// run passes the real time elapsed to the miniredis until Close.
func (s *Store) run() {
	defer close(s.done)
	last := time.Now()
	wait := Tick
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-timer.C:
		}
		now := time.Now()
		s.m.FastForward(now.Sub(last))
		last = now
		wait = max(Tick, sweepShare*time.Since(now))
		timer.Reset(wait)
	}
}
