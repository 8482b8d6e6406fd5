package engine

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Bounds of the decision time, in microseconds since 1970: the script's
// windows need t > every period (so the retention marker, scored
// -retention, is never counted) and t < 2^53 (exact in Lua's doubles).
const (
	minTime = 946_684_800_000_000   // 2000-01-01
	maxTime = 8_835_984_000_000_000 // 2250-01-01
)

var errClock = errors.New("engine: WithClock time outside 2000..2250")

// argTime returns the script's time argument: 0 for Redis TIME, or the
// test clock in microseconds.
func (e *Engine) argTime() (int64, error) {
	if e.clock == nil {
		return 0, nil
	}
	t := e.clock().UnixMicro()
	if t < minTime || t >= maxTime {
		return 0, errClock
	}
	return t, nil
}

// runAll decides a batch on a single Redis server with one script call:
// every key of every call, one op per call.
func (e *Engine) runAll(batch []*call) {
	lead := batch[0]
	t, err := e.argTime()
	if err != nil {
		failAll(batch, err)
		return
	}
	args := append(lead.args[:0], "evalsha", e.shaArg, 0)
	fa := &lead.flat
	fa.reset(t)
	nkeys := 0
	for _, c := range batch {
		fa.op(c, c.all)
		for i := range c.plan.keys {
			args = append(args, &c.plan.args[i])
		}
		nkeys += len(c.plan.keys)
	}
	args[2] = nkeys
	args = fa.appendTo(args)
	lead.args = args

	ctx := lead.ctx.start(e.timeout)
	defer lead.ctx.stop()
	sent := e.mono()
	v, err := e.evalInts(ctx, args)
	clear(args) // drop the pointers into other calls
	e.stamp(batch, sent)
	if err != nil {
		e.failRun(batch, err)
		return
	}
	r := ireader{v: v}
	sec, usec := r.int(maxTime/1e6), r.int(999_999)
	t = sec*1e6 + usec
	for _, c := range batch {
		c.sec, c.usec = sec, usec
		c.status, c.suffix = readFlatOp(&r, c, c.all, t)
	}
	if err := r.end(); err != nil {
		e.failRun(batch, err)
		return
	}
	for _, c := range batch {
		if c.status == statusCollision {
			c.err = errCollision
		}
	}
	e.runUndos(ctx, nil)
}

var errCollision = errors.New("engine: no unique member after retries")

// stamp stamps the calls of batch with the time their script call was
// sent and the time it came back.
func (e *Engine) stamp(batch []*call, sent int64) {
	recv, wall := e.mono(), e.now().UnixMicro()
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
// its requests, so their undo is queued (see undoQueue).
func (e *Engine) failRun(batch []*call, err error) {
	for _, c := range batch {
		c.err = err
		e.queueUndo(c, c.all, -1)
	}
}

// evalInts runs the script with args ("evalsha", sha, numkeys, ...) in
// the format of lua/multi_window.lua and returns its reply. NOSCRIPT is
// handled as by eval.
func (e *Engine) evalInts(ctx context.Context, args []any) ([]int64, error) {
	cmd := redis.NewIntSliceCmd(ctx, args...)
	err := e.client.Process(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args[0], args[1] = "eval", e.srcArg
		cmd = redis.NewIntSliceCmd(ctx, args...)
		err = e.client.Process(ctx, cmd)
		args[0], args[1] = "evalsha", e.shaArg
	}
	if err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}
