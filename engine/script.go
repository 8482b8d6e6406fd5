package engine

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
)

var errClock = errors.New("engine: WithClock time outside 2000..2250")

// argTime returns the script's time argument: 0 for Redis TIME, or the
// test clock in microseconds.
func (e *Engine) argTime() (int64, error) {
	if e.clock == nil {
		return 0, nil
	}
	t := e.clock().UnixMicro()
	if t < codec.MinTime || t >= codec.MaxTime {
		return 0, errClock
	}
	return t, nil
}

// runAll decides a batch on a single Redis server with one script call:
// every key of every call, one op per call.
func (e *Engine) runAll(lead *call, batch []*call) {
	t, err := e.argTime()
	if err != nil {
		failAll(batch, err)
		return
	}
	ctx := lead.ctx.start(e.timeout)
	defer lead.ctx.stop()
	if e.fn.on.Load() == fnUnknown {
		e.prepareFn(ctx)
	}
	args := e.scriptArgs(lead, batch, t, lead.sharing(batch))
	sent := e.mono()
	v, err := e.evalInts(ctx, args)
	clear(args) // drop the pointers into other calls
	e.stamp(batch, sent)
	if err != nil {
		e.failRun(batch, err)
		return
	}
	r := codec.Reader{V: v}
	sec, usec := r.Int(codec.MaxTime/1e6), r.Int(999_999)
	t = sec*1e6 + usec
	for _, c := range batch {
		c.sec, c.usec = sec, usec
		c.status, c.suffix = readFlatOp(&r, c, c.all, t)
	}
	if err := r.End(); err != nil {
		e.failRun(batch, err)
		return
	}
	for _, c := range batch {
		if c.status == codec.StatusCollision {
			c.err = errCollision
		}
	}
	e.runUndos(ctx, nil)
}

var errCollision = errors.New("engine: no unique member after retries")

// scriptArgs returns the arguments of the FCALL or EVALSHA (scriptHead)
// that decides batch at time t (µs, or 0 for the server's TIME), one op
// per call over all its keys, built in lead's buffers. shared marks the calls that share a key
// with another call of the batch (see call.sharing); nil marks none.
func (e *Engine) scriptArgs(lead *call, batch []*call, t int64, shared []bool) []any {
	cmd, name := e.scriptHead()
	args := append(lead.args[:0], cmd, name, 0)
	fa := &lead.flat
	fa.Reset(t)
	nkeys := 0
	for ci, c := range batch {
		opArgs(fa, c, c.all, shared != nil && shared[ci])
		for i := range c.plan.Keys {
			args = c.plan.AppendKeyArgs(args, i)
		}
		nkeys += len(c.plan.Keys) + c.plan.Blocked + c.plan.NUnstable
	}
	args[2] = nkeys
	args = fa.AppendTo(args)
	lead.args = args
	return args
}

// stamp stamps the calls of batch with the time their script call was
// sent and the time it came back.
func (e *Engine) stamp(batch []*call, sent int64) {
	recv, wall := e.recvWall()
	if e.clock == nil {
		e.lastAnswer.Store(recv) // recv is e.elapsed then
	}
	for _, c := range batch {
		c.sent, c.recv, c.wall = sent, recv, wall
	}
}

func failAll(batch []*call, err error) {
	for _, c := range batch {
		c.err = err
	}
}

// failRun fails a batch whose script call was sent: Redis may have counted
// its requests, so their undo is queued (see undo.Queue).
func (e *Engine) failRun(batch []*call, err error) {
	for _, c := range batch {
		c.err = err
		e.queueUndo(c, c.all, -1)
	}
}

// evalInts runs the script with args ("fcall" or "evalsha", its name,
// numkeys, ...) in the format of lua/multi_window.lua and returns its
// reply. A call the server did not run goes again (see retryScripts).
func (e *Engine) evalInts(ctx context.Context, args []any) ([]int64, error) {
	cmd := redis.NewIntSliceCmd(ctx, args...)
	if err := e.client.Process(ctx, cmd); err != nil {
		cmds := []*redis.IntSliceCmd{cmd}
		e.retryScripts(ctx, cmds)
		cmd = cmds[0]
	}
	if err := cmd.Err(); err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}

// noScript reports whether err is Redis's NOSCRIPT: the server does not
// have the script (SCRIPT FLUSH, a restart, a promoted replica), and the
// call must be sent again with its source.
func noScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// asEval turns the arguments of an EVALSHA ("evalsha", sha, numkeys, ...)
// into those of an EVAL of src, in place.
func asEval(args []any, src any) []any {
	args[0], args[1] = "eval", src
	return args
}

// Op modes of the script.
const (
	opAllow  = 1
	opPeek   = 2
	opFinish = 3 // see Finish
)

// readFlatOp reads the result of c's op over keys into c.res and returns
// its status and suffix. t is the decision time in µs: the reply holds
// scores, from which the waits follow.
func readFlatOp(r *codec.Reader, c *call, keys []int32, t int64) (status, suffix int64) {
	if c.mode == opFinish {
		codec.ReadFinish(r, c.res[:0:0])
		for _, k := range keys {
			c.res[k] = r.Int(2)
		}
		return codec.StatusAdmitted, 0
	}
	return codec.ReadOp(r, &c.plan, c.res, c.bleft, keys, t)
}

// blockedFor records that key k of c is blocked for left µs more (none
// when left is 0): every window of the key then waits at least that long.
func (c *call) blockedFor(k int, left int64) { codec.BlockedFor(&c.plan, c.res, c.bleft, k, left) }

// opArgs appends the op of c over the keys listed in keys (indices into
// c.plan.Keys) to f: see Args.Op and Args.Finish.
func opArgs(f *codec.Args, c *call, keys []int32, shared bool) {
	switch c.mode {
	case opFinish:
		f.Finish(c.fin[0].Member, c.fin, keys, c.pub)
	case opAllow:
		f.Op(c.member, &c.plan, keys, shared)
	default:
		f.Op(nil, &c.plan, keys, shared)
	}
}
