//go:build race

package engine

// raceEnabled reports whether the race detector is on: sync.Pool then
// drops a random share of what it is given, so allocation counts vary.
const raceEnabled = true
