// Package lua holds the Redis Lua scripts of slidelimit as Go strings, so
// that they ship inside the binary. Each script's header specifies its
// arguments and reply; the engine package documentation explains what
// they decide and store.
package lua

import _ "embed"

// MultiWindow is the source of the multi-window sliding-log script: it
// checks, admits, peeks at and rolls back batches of rate-limit requests
// against sorted sets, each request atomically. The header of
// multi_window.lua specifies its wire format, the engine package
// documentation its semantics.
//
// It is number.lua followed by multi_window.lua.
var MultiWindow = number + multiWindow

//go:embed multi_window.lua
var multiWindow string

// GiveBack is the source of the script that removes one request's entry
// from a weighted key (a key of a limiter with a cost or a grain), for
// rollbacks, undos and give-backs, or changes its cost by a signed delta,
// for settlements. Its header specifies its arguments; see the engine
// package documentation.
//
// It is number.lua followed by give_back.lua.
var GiveBack = number + giveBack

//go:embed give_back.lua
var giveBack string

// Renew is the source of the script that extends the leases of running
// requests' slots (in-flight windows). Its header specifies its arguments
// and reply; slot keys are specified in multi_window.lua.
//
//go:embed renew.lua
var Renew string

// number is the source of the function that the scripts read numbers
// from Redis with (see number.lua): it precedes each script that reads
// scores or stored values.
//
//go:embed number.lua
var number string
