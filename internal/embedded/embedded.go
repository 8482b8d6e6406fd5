// Package embedded runs the embedded store: a miniredis in this process
// whose keys expire with the real clock, as on Redis.
//
// A plain miniredis counts a key's time to live down only when told to
// (Miniredis.FastForward), so its keys with an expiry stay for good. A
// Store turns on miniredis's ClockTTL: before each command, every time to
// live is counted down by the real time elapsed since the last command.
// An expiry is therefore exact, as seen by the next command, and each
// command costs a pass over the keys with an expiry (docs/engine.md has
// the measurements).
package embedded

import (
	"sync"

	"github.com/alicebob/miniredis/v2"
)

// Store is an embedded miniredis whose keys expire with the real clock.
// Its methods are safe for concurrent use.
type Store struct {
	m    *miniredis.Miniredis
	once sync.Once
}

// Start runs a Store on a free loopback port. Close stops it.
func Start() (*Store, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	m.ClockTTL(true)
	return &Store{m: m}, nil
}

// Addr is the address the Store listens on, host:port.
func (s *Store) Addr() string { return s.m.Addr() }

// Close stops the Store's server; connections to it are refused
// afterwards. Close may be called more than once.
func (s *Store) Close() {
	s.once.Do(s.m.Close)
}
