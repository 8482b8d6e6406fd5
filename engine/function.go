package engine

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/lua"
)

// The multi-window script as a Redis Function (lua.Library):
// loaded once per server, it is called with FCALL, which runs only the
// script's main function. EVALSHA runs the whole script each call,
// re-creating its helpers (docs/performance.md, Redis Functions, says
// what that costs). The library is named by the script's
// SHA1, so every version of slidelimit loads its own and none replaces
// another's; it stays on the server (FUNCTION DELETE removes one).
var fnName, fnLibrary = lua.Library()

// Function states of an engine (fnState.on).
const (
	fnUnknown int32 = iota // not loaded yet: the next batch loads it first
	fnOn                   // decisions go as FCALL
	fnOff                  // the servers cannot load it: EVALSHA for good
)

// fnState is an engine's use of the Function. A server that lacks it
// (restarted empty, FUNCTION FLUSH, a new master) answers FCALL with
// "Function not found": that call goes again as EVALSHA (see
// retryScripts) and the library is loaded again. A server that cannot
// load functions (Redis before 7, miniredis, an ACL without FUNCTION or
// FCALL) turns them off for the engine's life.
type fnState struct {
	on      atomic.Int32
	loading atomic.Bool // one load at a time; the others go as EVALSHA
	missed  atomic.Bool // a server lacked the function: load it again
}

// scriptHead returns the first two arguments of a decision's script
// call: FCALL of the function, or EVALSHA of the script. They are
// interfaces holding constants or boxed once, so that building a call
// allocates nothing for them.
func (e *Engine) scriptHead() (cmd, name any) {
	if e.fn.on.Load() == fnOn {
		return "fcall", e.fnArg
	}
	return "evalsha", e.shaArg
}

// prepareFn loads the library before the engine's first batch, and again
// after a server was found without it. A load that fails without an
// answer (a server down) or for the moment (see fnTransient) leaves the
// function on: a server that comes back without it answers FCALL
// "Function not found", and its calls go as EVALSHA until the next load.
// Any other error reply (a script that does not compile, say) turns it
// off.
func (e *Engine) prepareFn(ctx context.Context) {
	f := &e.fn
	if f.on.Load() == fnOff || f.on.Load() == fnOn && !f.missed.Load() {
		return
	}
	if !f.loading.CompareAndSwap(false, true) {
		return
	}
	defer f.loading.Store(false)
	f.missed.Store(false)
	if !canLoadFn(e.client) {
		f.on.Store(fnOff)
		return
	}
	if err := e.loadFn(ctx); err != nil && answered(err) && !fnTransient(err) {
		e.fnOff(err)
		return
	}
	f.on.CompareAndSwap(fnUnknown, fnOn)
}

// fnTransient reports whether err is a reply that says nothing of whether
// the server can load functions, only that it could not now: a script
// running past busy-reply-threshold, a server loading its data, out of
// memory, a replica or a cluster in the middle of a failover. The
// function stays on; a server that then lacks it answers FCALL "Function
// not found", and is asked to load it again.
func fnTransient(err error) bool {
	for _, p := range []string{"BUSY", "LOADING", "OOM", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MISCONF", "NOREPLICAS"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// canLoadFn reports whether the engine can load the library on every
// server c uses: a wrapper the engine cannot see through may send a
// command without keys to any server, and a server it did not reach
// would lack the function.
func canLoadFn(c Client) bool {
	switch c.(type) {
	case *redis.Client, *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// loadFn loads the library on every server the engine uses: every master
// of a cluster, every shard of a Ring, the one server otherwise. It
// returns the first error other than "already exists".
func (e *Engine) loadFn(ctx context.Context) error {
	load := func(ctx context.Context, c Client) error {
		err := c.Process(ctx, redis.NewStringCmd(ctx, "function", "load", fnLibrary))
		if err != nil && redis.HasErrorPrefix(err, "Library") && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	}
	each := func(ctx context.Context, c *redis.Client) error { return load(ctx, c) }
	switch c := e.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, each)
	case *redis.Ring:
		return c.ForEachShard(ctx, each)
	}
	return load(ctx, e.client)
}

// fnOff turns the Function off for the engine's life: the servers cannot
// load or run it (err says why).
func (e *Engine) fnOff(err error) {
	if e.fn.on.Swap(fnOff) != fnOff {
		e.log.Debug("engine: redis cannot run the script as a Function, so decisions use EVALSHA, "+
			"which costs each decision a few µs more of Redis CPU", "err", err)
	}
}

// noFunction reports whether err is FCALL's reply from a server that has
// no such function: its library was not loaded there, or was lost.
func noFunction(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "Function not found")
}

// fnRefused reports whether err is FCALL's reply from a server that cannot
// run functions: it does not know the command (before Redis 7,
// miniredis), or the user may not run it (ACL).
func fnRefused(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "unknown command") || redis.HasErrorPrefix(err, "NOPERM"))
}

// fnOOM reports whether err is FCALL's reply from a server out of memory.
// Redis refuses a whole Function call (one without the allow-oom flag)
// before it runs, where it runs an EVAL until its first write, so that a
// denial or a peek, which writes nothing, is still answered: the call
// goes again as EVALSHA. (A Function that started is never refused a
// write for memory, so an OOM reply means it ran nothing.)
func fnOOM(err error) bool { return err != nil && outOfMemory(err) }

// scriptRetry returns the arguments to send cmd again with when the server
// did not run it, or nil: FCALL that the server could not run goes as
// EVALSHA (which nothing but a missing script refuses), EVALSHA of a
// script the server lacks as EVAL of its source. Neither ran anything, so
// sending it again counts nothing twice. It notes what the error says of
// the Function (see fnState).
func (e *Engine) scriptRetry(cmd *redis.IntSliceCmd, src any) []any {
	err := cmd.Err()
	if err == nil {
		return nil
	}
	args := cmd.Args()
	if noScript(err) {
		return asEval(args, src)
	}
	if len(args) < 2 || args[0] != "fcall" {
		return nil
	}
	switch {
	case noFunction(err):
		e.fn.missed.Store(true)
	case fnRefused(err):
		e.fnOff(err)
	case !fnOOM(err):
		return nil
	}
	args[0], args[1] = "evalsha", e.shaArg
	return args
}

// retryScripts sends the script calls among cmds that the server did not
// run again (see scriptRetry), in one pipeline per step: FCALL as
// EVALSHA, then EVALSHA as EVAL. Calls sent again keep their order.
func (e *Engine) retryScripts(ctx context.Context, cmds []*redis.IntSliceCmd) {
	for range 2 {
		var retry redis.Pipeliner
		for i, cmd := range cmds {
			args := e.scriptRetry(cmd, e.srcArg)
			if args == nil {
				continue
			}
			if retry == nil {
				retry = e.client.Pipeline()
			}
			cmds[i] = redis.NewIntSliceCmd(ctx, args...)
			_ = retry.Process(ctx, cmds[i])
		}
		if retry == nil {
			break
		}
		_, _ = retry.Exec(ctx)
	}
	if e.fn.missed.Load() {
		e.prepareFn(ctx)
	}
}
