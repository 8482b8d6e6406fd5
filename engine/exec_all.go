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
	argv := appendHeader(lead.argv[:0], t, len(batch))
	args := append(lead.args[:0], "evalsha", e.shaArg, 0)
	nkeys := 0
	for _, c := range batch {
		argv = appendOp(argv, c, c.all)
		for i := range c.plan.keys {
			args = append(args, &c.plan.args[i])
		}
		nkeys += len(c.plan.keys)
	}
	argv = append(argv, ']')
	args[2] = nkeys
	args = append(args, argv)
	lead.argv, lead.args = argv, args

	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	sent := e.mono()
	s, err := e.eval(ctx, args)
	clear(args) // drop the pointers into other calls
	e.answered(batch, sent)
	if err != nil {
		e.failRun(batch, err)
		return
	}
	r := reader{s: s}
	sec, usec := r.int(maxTime/1e6), r.int(999_999)
	t = sec*1e6 + usec
	for _, c := range batch {
		c.sec, c.usec = sec, usec
		c.status, c.suffix = readOp(&r, c, c.all, t)
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

// answered stamps the calls of batch with the time their script call was
// sent and the time it came back.
func (e *Engine) answered(batch []*call, sent int64) {
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

// eval runs the script with args ("evalsha", sha, numkeys, ...) and
// returns its reply string. After NOSCRIPT (a restarted or flushed server,
// a promoted replica) it sends the source with EVAL, which also caches it
// again. args[0] and args[1] are restored before it returns.
func (e *Engine) eval(ctx context.Context, args []any) (string, error) {
	cmd := redis.NewCmd(ctx, args...)
	err := e.client.Process(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args[0], args[1] = "eval", e.srcArg
		cmd = redis.NewCmd(ctx, args...)
		err = e.client.Process(ctx, cmd)
		args[0], args[1] = "evalsha", e.shaArg
	}
	if err != nil {
		return "", err
	}
	s, ok := cmd.Val().(string)
	if !ok {
		return "", newReplyError("reply is not a string", "")
	}
	return s, nil
}
