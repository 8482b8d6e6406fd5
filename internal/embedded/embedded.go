// Package embedded runs the embedded store: a miniredis in this process
// whose keys expire with the real clock, as on Redis.
//
// miniredis counts a key's time to live down only when told to
// (Miniredis.FastForward); its TIME follows the real clock. A Store's
// goroutine tells it every Tick how much real time passed, so that an
// expiry happens within about Tick of its time. (miniredis's own ClockTTL
// would be exact, but it sweeps every key before every command; a hook
// before each command would run inside scripts too, with the store
// locked.)
package embedded

import (
	"slices"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Tick is the interval between two passes of the real time to a Store's
// miniredis. A key set between two passes has the whole interval counted
// at the next, so it expires up to one interval early or late; a pass
// that comes late (a loaded machine) makes its interval longer. A pass
// sweeps every key (miniredis sorts them) with the store locked: when
// passes take d (the shortest of the last few, so that one descheduled
// pass does not count), the interval is sweepShare*d, so sweeping takes
// at most 1/sweepShare of a core, and the interval, hence the error,
// grows with the number of keys, up to maxInterval (docs/engine.md has
// the measurements).
const Tick = 10 * time.Millisecond

// sweepShare bounds the part of the time spent sweeping: passes that
// take d come sweepShare*d apart.
const sweepShare = 20

// maxInterval bounds the interval between passes whatever they cost.
const maxInterval = time.Second

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
	var took [4]time.Duration // the last passes' durations
	timer := time.NewTimer(Tick)
	defer timer.Stop()
	for i := 0; ; i++ {
		select {
		case <-s.stop:
			return
		case <-timer.C:
		}
		// The clock is read once the store is free: a script running
		// meanwhile set its keys before now, not after it.
		s.m.Lock()
		now := time.Now()
		s.m.Unlock()
		s.m.FastForward(now.Sub(last))
		last = now
		took[i%len(took)] = time.Since(now)
		timer.Reset(min(max(Tick, sweepShare*slices.Min(took[:])), maxInterval))
	}
}
