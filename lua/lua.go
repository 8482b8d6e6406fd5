// Package lua holds the Redis Lua scripts of slidelimit as Go strings, so
// that they ship inside the binary. Each script's header specifies its
// arguments and reply. The engine package documentation explains what
// they decide, and docs/engine.md what they store. The scripts are returned by functions, so that
// no importer can change the text a script's SHA1 was computed from.
package lua

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/slidelimit/slidelimit/internal/scriptconst"
)

// MultiWindow returns the source of the multi-window sliding-log script: it
// checks, admits and peeks at batches of rate-limit requests against
// sorted sets, each request atomically, and finishes admitted ones (gives
// them back, releases their slots, settles their costs). The header of
// multi_window.lua specifies its wire format, the engine package
// documentation its semantics.
//
// It is the script's EVAL form: number.lua, then multi_window.lua, which
// defines the function run, and its parts, then a call of run with KEYS
// and ARGV. MultiWindowLibrary is the same text as a Redis Function.
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
	multiWindowText = joinMultiWindow()
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

// multiWindowParts are the files of the multi-window script after
// multi_window.lua, in the order its header lists them.
var multiWindowParts = []string{
	"mw_op.lua",
	"mw_count.lua",
	"mw_weighted.lua",
	"mw_distinct.lua",
	"mw_calendar.lua",
	"mw_finish.lua",
	"mw_weight_change.lua",
}

//go:embed multi_window.lua mw_*.lua
var multiWindowFiles embed.FS

// scriptConstants are the values of the constants that the multi-window
// script's source names as ${NAME} (see its header, Constants).
var scriptConstants = map[string]int64{
	"EPOCH":       1 << 51, // offsets epoch markers below every -retention
	"MAX_TOTAL":   scriptconst.MaxTotal,
	"BUSY":        64, // entries in a key's longest window that make it busy
	"CONF_MAX":    1024,
	"SLOTS":       1 << 17, // reply indexes a memo entry can hold
	"MERGE_SCAN":  257,
	"WEIGHT_MOVE": 64,
	"WEIGHT_READ": 2*64 + 4, // 2 * WEIGHT_MOVE + 4
	"CAL_BOUNDS":  4,
	"CAL_MARGIN":  1000, // ms
	"SECOND":      1_000_000,
	"MINUS":       '-',
	"DENIED":      scriptconst.StatusDenied,
	"ADMITTED":    scriptconst.StatusAdmitted,
	"COLLISION":   scriptconst.StatusCollision,
}

// joinMultiWindow returns number.lua, multi_window.lua and its parts, in
// order, as one chunk, each ${NAME} replaced with its constant. A part
// that cannot be read leaves the text without it, which TestJoined
// reports.
func joinMultiWindow() string {
	var b strings.Builder
	b.WriteString(number)
	for _, name := range append([]string{"multi_window.lua"}, multiWindowParts...) {
		src, _ := multiWindowFiles.ReadFile(name)
		b.Write(src)
	}
	pairs := make([]string, 0, 2*len(scriptConstants))
	for name, v := range scriptConstants {
		pairs = append(pairs, "${"+name+"}", strconv.FormatInt(v, 10))
	}
	return strings.NewReplacer(pairs...).Replace(b.String())
}

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
