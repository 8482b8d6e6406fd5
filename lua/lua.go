// Package lua holds the Redis Lua scripts of slidelimit as Go strings, so
// that they ship inside the binary. Each script's header specifies its
// arguments and reply; the engine package documentation explains what
// they decide and store. The scripts are returned by functions, so that
// no importer can change the text a script's SHA1 was computed from.
package lua

import _ "embed"

// MultiWindow returns the source of the multi-window sliding-log script: it
// checks, admits and peeks at batches of rate-limit requests against
// sorted sets, each request atomically, and finishes admitted ones (gives
// them back, releases their slots, settles their costs). The header of
// multi_window.lua specifies its wire format, the engine package
// documentation its semantics.
//
// It is number.lua followed by multi_window.lua.
func MultiWindow() string { return multiWindowSrc }

var multiWindowSrc = number + multiWindow

//go:embed multi_window.lua
var multiWindow string

// Renew returns the source of the script that extends the leases of running
// requests' slots (in-flight windows). Its header specifies its arguments
// and reply; slot keys are specified in multi_window.lua.
//
// It is number.lua followed by renew.lua.
func Renew() string { return renewSrc }

var renewSrc = number + renew

//go:embed renew.lua
var renew string

// number is the source of the function that the scripts read numbers
// from Redis with (see number.lua): it precedes each script that reads
// scores or stored values.
//
//go:embed number.lua
var number string

// SetRules returns the source of the script that stores or removes one
// rule override and increments the overrides' version in the same call.
// Its header specifies its arguments and reply.
func SetRules() string { return setRules }

//go:embed set_rules.lua
var setRules string

// LoadRules returns the source of the script that reads the rule
// overrides with their version. Its header specifies its arguments and
// reply.
func LoadRules() string { return loadRules }

//go:embed load_rules.lua
var loadRules string
