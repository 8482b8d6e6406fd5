// Package lua holds the Redis Lua scripts of slidelimit as Go strings, so
// that they ship inside the binary. Each script's header specifies its
// arguments and reply. The engine package documentation explains what
// they decide, and docs/engine.md what they store. The scripts are returned by functions, so that
// no importer can change the text a script's SHA1 was computed from.
package lua

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
)

// MultiWindow returns the source of the multi-window sliding-log script: it
// checks, admits and peeks at batches of rate-limit requests against
// sorted sets, each request atomically, and finishes admitted ones (gives
// them back, releases their slots, settles their costs). The header of
// multi_window.lua specifies its wire format, the engine package
// documentation its semantics.
//
// It is the script's EVAL form: number.lua, then multi_window.lua, which
// defines the function run, then a call of run with KEYS and ARGV.
// MultiWindowLibrary is the same text as a Redis Function.
func MultiWindow() string { return multiWindowEval }

// MultiWindowLibrary returns the multi-window script as a Redis Function
// library, for FUNCTION LOAD: number.lua and multi_window.lua, as in
// MultiWindow, after a shebang naming the library and followed by the
// registration of run as the function MultiWindowFunction. FCALL of that
// function with the script's KEYS and ARGV replies exactly as EVAL of
// MultiWindow does; it only skips re-creating the script's helpers, which
// the library creates once, when it is loaded.
func MultiWindowLibrary() string { return multiWindowLib }

// MultiWindowFunction returns the name of the function, and of the
// library, that MultiWindowLibrary registers: "slidelimit_" followed by
// the SHA1 of MultiWindow (the EVALSHA hash), so that each version of the
// script is its own library, and two versions of slidelimit sharing a
// server do not replace each other's.
func MultiWindowFunction() string { return multiWindowName }

var (
	multiWindowText = number + multiWindow
	multiWindowEval = multiWindowText + "return run(KEYS, ARGV)\n"
	multiWindowName = "slidelimit_" + sha1Hex(multiWindowEval)
	multiWindowLib  = "#!lua name=" + multiWindowName + "\n" + multiWindowText +
		"redis.register_function('" + multiWindowName + "', run)\n"
)

// sha1Hex returns the SHA1 of s in lowercase hex, as SCRIPT LOAD names a
// script.
func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

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
