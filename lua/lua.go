// Package lua holds the Redis Lua scripts of slidelimit, embedded in the
// binary. Script returns a script's source by name, Library the decision
// script as a Redis Function. Each script's header specifies its arguments
// and reply; multi_window.lua is the wire format's spec. The engine package
// documentation explains what the scripts decide, docs/engine.md what they
// store. Functions return the text, so no importer can change it.
package lua

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/slidelimit/slidelimit/internal/scriptconst"
)

// Script returns the source of the named script, to run with EVAL, or ""
// if there is no such script. The names are those of the scripts' entry
// files without ".lua":
//
//   - "multi_window": checks, admits and peeks at batches of rate-limit
//     requests, each atomically, and finishes admitted ones.
//   - "renew": extends the leases of running requests' slots.
//   - "set_rules": stores or removes one rule override.
//   - "load_rules": reads the rule overrides with their version.
//
// Each entry file's header specifies the script's arguments and reply.
func Script(name string) string {
	switch name {
	case "multi_window":
		return multiWindowEval
	case "renew":
		return renewSrc
	case "set_rules":
		return setRules
	case "load_rules":
		return loadRules
	}
	return ""
}

// Library returns the multi-window script as a Redis Function library, for
// FUNCTION LOAD, and the name of the one function it registers. FCALL of
// that function replies exactly as EVAL of Script("multi_window") does.
func Library() (name, src string) { return multiWindowName, multiWindowLib }

// The multi-window script's EVAL form is number.lua, then multi_window.lua,
// which defines the function run, and its parts, then a call of run with
// KEYS and ARGV. The library is the same text after a shebang naming it,
// with run registered instead of called; the library and its function are
// named "slidelimit_" followed by the EVALSHA hash, so that two versions of
// slidelimit sharing a server do not replace each other's.
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
	"mw_regions.lua",
}

//go:embed multi_window.lua mw_*.lua
var multiWindowFiles embed.FS

// scriptConstants are the values of the constants that the multi-window
// script's source names as ${NAME} (see its header, Constants).
var scriptConstants = map[string]int64{
	"EPOCH":       1 << 51, // offsets epoch markers below every -retention
	"COPY":        1 << 52, // offsets the copies of regions below every epoch marker
	"MAX_TOTAL":   scriptconst.MaxTotal,
	"BUSY":        64, // entries in a key's longest window that make it busy
	"CONF_MAX":    1024,
	"SLOTS":       1 << 17, // reply indexes a memo entry can hold
	"MERGE_SCAN":  257,
	"WEIGHT_MOVE": 64,
	"WEIGHT_READ": 2*64 + 4, // 2 * WEIGHT_MOVE + 4
	"CAL_BOUNDS":  4,
	"CAL_MARGIN":  1000,    // ms
	"COUNT_MAX":   1 << 30, // above every count key's count, below every time (see mw_regions.lua)
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

// renewSrc is number.lua followed by renew.lua.
var renewSrc = number + renew

//go:embed renew.lua
var renew string

// number is the source of the function that the scripts read numbers
// from Redis with (see number.lua): it precedes each script that reads
// scores or stored values.
//
//go:embed number.lua
var number string

//go:embed set_rules.lua
var setRules string

//go:embed load_rules.lua
var loadRules string
