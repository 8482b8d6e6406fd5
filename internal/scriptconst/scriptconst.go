// Package scriptconst holds the numbers that the multi-window script
// (lua/multi_window.lua) and the engine that reads its reply share. The
// lua package writes them into the script; the engine reads replies with
// them.
package scriptconst

// An op's status in the script's reply (its code is status + 4*suffix).
const (
	StatusDenied    = 0 // a window had no room
	StatusAdmitted  = 1 // admitted, or a peek that would admit
	StatusCollision = 2 // no unique member found; nothing written
)

// MaxTotal, 2^53 - 1, bounds a weighted key's running total, so that it
// stays exact in Lua's doubles; it bounds every count the reply holds.
const MaxTotal = 1<<53 - 1
