package engine

import (
	"cmp"
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/undo"
)

// memberText is the member the script adds for id after suffix collisions.
func memberText(id string, suffix int64) string {
	if suffix == 0 {
		return id
	}
	return id + "." + strconv.FormatInt(suffix, 10)
}

// remove runs us within ctx, as finish ops of the script (one script
// call on a single server, one per undo elsewhere, in one pipeline), and
// returns the indices of those that failed, with the first error. It is
// how the engine takes entries out of Redis outside the batches:
// rollbacks and the undos of failed calls and finishes. Removing a given
// member is idempotent, and members are unique per request, so a removal
// never takes another request's entry. The script publishes the keys that
// lost an entry, for cached denials in every process.
func (e *Engine) remove(ctx context.Context, us []codec.Undo) (failed []int, first error) {
	if len(us) == 0 {
		return nil, nil
	}
	t, err := e.argTime()
	if err != nil {
		t = 0 // finish ops do not read the time
	}
	var fa codec.Args
	var groups [][]int32 // per script call: indices into us
	if e.group == groupAll {
		all := make([]int32, len(us))
		for i := range all {
			all[i] = int32(i)
		}
		groups = [][]int32{all}
	} else {
		for i := range us {
			groups = append(groups, []int32{int32(i)})
		}
	}
	pipe := e.client.Pipeline()
	cmds := make([]*redis.IntSliceCmd, len(groups))
	head, name := e.scriptHead()
	for g, idx := range groups {
		args := []any{head, name, len(idx)}
		for _, i := range idx {
			args = append(args, us[i].Key)
		}
		first := fa.Begin(t)
		for _, i := range idx {
			fa.Finish(us[i].Member, us[i:i+1], []int32{0}, e.chanName)
		}
		cmds[g] = redis.NewIntSliceCmd(ctx, fa.AppendFrom(args, first)...)
		_ = pipe.Process(ctx, cmds[g])
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	e.retryScripts(ctx, cmds)
	var gone []string
	for g, cmd := range cmds {
		flags, err := cmd.Result()
		if err == nil {
			flags, err = readFinishes(flags, len(groups[g]))
		}
		for j, i := range groups[g] {
			switch {
			case err != nil:
				failed = append(failed, int(i))
				first = cmp.Or(first, err)
			case flags[j] == 1 && us[i].Publishes():
				gone = append(gone, us[i].Key)
			}
		}
	}
	e.forgetKnown(gone)
	return failed, first
}

// readFinishes reads the reply of a script call of n finish ops of one
// key each and returns each op's flag (see readFinish).
func readFinishes(v []int64, n int) ([]int64, error) {
	r := codec.Reader{V: v}
	r.Int(codec.MaxTime / 1e6)
	r.Int(999_999)
	flags := make([]int64, n)
	for i := range flags {
		codec.ReadFinish(&r, flags[i:i+1])
	}
	if err := r.End(); err != nil {
		return nil, err
	}
	return flags, nil
}

// warnFailed logs that op (a GiveBack, Release or settlement) of member
// failed and was queued, throttled (see undo.Queue.LogFailed).
func (e *Engine) warnFailed(op, member string, err error) {
	e.undos.LogFailed("engine: "+op+" failed; retried before the next script call", member, err)
}

// queueUndo queues the undo of c's member in the keys listed in keys
// (indices into c.plan.keys), with the given suffix or -1.
func (e *Engine) queueUndo(c *call, keys []int32, suffix int64) {
	if c.mode != opAllow || len(keys) == 0 {
		return
	}
	m := string(c.member)
	now := time.Now().UnixMicro()
	us := make([]codec.Undo, len(keys))
	for i, k := range keys {
		us[i] = undo.Of(&c.plan, int(k), m, suffix, now)
	}
	e.undos.Push(us...)
}

// runUndos runs, within ctx, the queued undos of the keys for which
// answers reports true (nil: every key).
func (e *Engine) runUndos(ctx context.Context, answers func(key string) bool) {
	e.undos.Run(ctx, answers)
}
