package engine

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/engine/internal/undo"
)

// split groups c's keys into parts, one script call each: keys of one hash
// slot together on a Redis Cluster, each key alone otherwise.
func (c *call) split(g grouping) {
	c.pkeys, c.parts = c.pkeys[:0], c.parts[:0]
	n := len(c.plan.Keys)
	if g == groupSlot {
		// Every key holds one of the request's windows at least, so
		// n <= maxWindows. (A uint64 here, for maxChecks keys, sent the
		// keys past the 64th twice.)
		var done [plan.MaxWindows]bool
		for i := range n {
			if done[i] {
				continue
			}
			s := slot(c.plan.Keys[i])
			start := int32(len(c.pkeys))
			for j := i; j < n; j++ {
				if !done[j] && (j == i || slot(c.plan.Keys[j]) == s) {
					done[j] = true
					c.pkeys = append(c.pkeys, int32(j))
				}
			}
			c.parts = append(c.parts, part{start: start, end: int32(len(c.pkeys))})
		}
	} else {
		for i := range n {
			c.pkeys = append(c.pkeys, int32(i))
			c.parts = append(c.parts, part{start: int32(i), end: int32(i + 1)})
		}
	}
}

// part returns the key indices of part i.
func (c *call) part(i int) []int32 {
	return c.pkeys[c.parts[i].start:c.parts[i].end]
}

type partCmd struct {
	c    *call
	part int
	cmd  *redis.IntSliceCmd
	pipe int // index of its domain's pipeline
}

// domainPipe is the pipeline of one domain's script calls in a batch.
type domainPipe struct {
	d      *domain
	pipe   redis.Pipeliner // nil when the domain is down
	err    error           // the first error of its calls
	answer bool            // one of its calls was answered
}

// runParts decides a batch when keys may live on different servers: one
// script call per part, one pipeline per server, the servers' pipelines
// sent concurrently and each waited for on its own, so that a server that
// fails or hangs fails only the calls that need it (go-redis would fail
// every command of one cross-server pipeline on a timeout). A server that
// is down is not asked. Each part
// reserves the request in its keys (check and add); when a part denies or
// fails, the parts that admitted are rolled back before any caller sees
// the decision, so the request is counted everywhere or nowhere and
// nothing is ever over-admitted. Until the rollback, the reservation can
// make a concurrent request see one entry too many: the error is on the
// side of denying.
func (e *Engine) runParts(lead *call, batch []*call) {
	t, err := e.argTime()
	if err != nil {
		failAll(batch, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	if e.fn.on.Load() == fnUnknown {
		e.prepareFn(ctx)
	}
	cmds, pipes := e.queueParts(ctx, lead, batch, t)
	sent := e.mono()
	e.execPipes(ctx, pipes, cmds)
	e.stamp(batch, sent)
	e.readParts(cmds, pipes)
	for i := range pipes {
		if dp := &pipes[i]; dp.pipe != nil {
			e.observe(dp.d, dp.answer, dp.err)
		}
	}
	for _, c := range batch {
		c.suffix = commonSuffix(c.parts)
	}
	e.rollback(batch)
	if e.undos.Len() > 0 {
		e.runUndos(ctx, servedBy(e, pipes))
	}
}

// queueParts queues the script call of every part of every call of batch
// at time t in the pipeline of its server, built in lead's buffers; a part
// whose server is down fails at once.
func (e *Engine) queueParts(ctx context.Context, lead *call, batch []*call, t int64) ([]partCmd, []domainPipe) {
	var cmds []partCmd
	var pipes []domainPipe
	head, name := e.scriptHead()
	fa := &lead.flat // every part's arguments; kept until the pipelines ran
	fa.Clear()
	for _, c := range batch {
		c.sec, c.usec, c.status, c.suffix = 0, 0, codec.StatusAdmitted, 0
		for i := range c.parts {
			d := c.parts[i].dom
			pi := slices.IndexFunc(pipes, func(p domainPipe) bool { return p.d == d })
			if pi < 0 {
				pi = len(pipes)
				dp := domainPipe{d: d}
				if !d.Down.Load() {
					dp.pipe = e.client.Pipeline()
				}
				pipes = append(pipes, dp)
			}
			if pipes[pi].pipe == nil {
				c.parts[i].stat, c.parts[i].suf = -1, 0
				if c.err == nil {
					c.err = errNotAsked
				}
				continue
			}
			keys := c.part(i)
			first := fa.BeginPart(t, len(c.parts) > 1)
			opArgs(fa, c, keys, false)
			args := make([]any, 0, 3+len(keys)+len(fa.Ends)-first)
			args = append(args, head, name, c.plan.NArgs(keys))
			for _, k := range keys {
				args = c.plan.AppendKeyArgs(args, int(k))
			}
			args = fa.AppendFrom(args, first)
			cmd := redis.NewIntSliceCmd(ctx, args...)
			_ = pipes[pi].pipe.Process(ctx, cmd) // queues; errors come from Exec
			cmds = append(cmds, partCmd{c: c, part: i, cmd: cmd, pipe: pi})
		}
	}
	return cmds, pipes
}

// execPipes sends the servers' pipelines concurrently and waits for them,
// then sends the calls the servers did not run again (see retryScripts).
func (e *Engine) execPipes(ctx context.Context, pipes []domainPipe, cmds []partCmd) {
	var wg sync.WaitGroup
	for i := range pipes {
		if p := pipes[i].pipe; p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = p.Exec(ctx) }() // errors are read per command
		}
	}
	wg.Wait()
	var failed []*redis.IntSliceCmd
	for i := range cmds {
		if cmds[i].cmd.Err() != nil {
			failed = append(failed, cmds[i].cmd)
		}
	}
	if failed == nil {
		return
	}
	e.retryScripts(ctx, failed)
	// retryScripts replaced the commands it sent again, in order, and left
	// the errors of the ones it replaced as they were.
	j := 0
	for i := range cmds {
		if cmds[i].cmd.Err() != nil {
			cmds[i].cmd = failed[j]
			j++
		}
	}
}

// readParts reads the replies of cmds into their calls and parts, and
// notes per server whether it answered and its first error. A part that
// failed may have run (a timeout, a lost reply): its undo is queued.
func (e *Engine) readParts(cmds []partCmd, pipes []domainPipe) {
	for i := range cmds {
		pc := &cmds[i]
		c := pc.c
		dp := &pipes[pc.pipe]
		v, err := pc.cmd.Result()
		if answered(err) {
			dp.answer = true
		}
		if err != nil && dp.err == nil {
			dp.err = err
		}
		var st, suf int64
		if err == nil {
			st, suf, err = c.readPart(v, pc.part)
		}
		if err != nil {
			c.parts[pc.part].stat = -1
			if c.err == nil {
				c.err = err
			}
			e.queueUndo(c, c.part(pc.part), -1)
			continue
		}
		c.parts[pc.part].stat, c.parts[pc.part].suf = st, suf
		switch st {
		case codec.StatusDenied:
			c.status = codec.StatusDenied
		case codec.StatusCollision:
			if c.err == nil {
				c.err = errCollision
			}
		}
	}
}

// readPart reads the reply v of c's part i, and returns its status and
// suffix. Each key always lives on the same server and uses its clock, so
// windows stay exact; the decision reports the latest time.
func (c *call) readPart(v []int64, i int) (st, suf int64, err error) {
	r := codec.Reader{V: v}
	sec, usec := r.Int(codec.MaxTime/1e6), r.Int(999_999)
	st, suf = readFlatOp(&r, c, c.part(i), sec*1e6+usec)
	if rerr := r.End(); rerr != nil {
		return 0, 0, rerr
	}
	if sec > c.sec || sec == c.sec && usec > c.usec {
		c.sec, c.usec = sec, usec
	}
	return st, suf, nil
}

// commonSuffix returns the suffix shared by every part, or -1 when parts
// differ (see receipt).
func commonSuffix(parts []part) int64 {
	for _, p := range parts[1:] {
		if p.suf != parts[0].suf {
			return -1
		}
	}
	return parts[0].suf
}

// servedBy returns whether key lives on a server that answered one of the
// batch's calls.
func servedBy(e *Engine, pipes []domainPipe) func(key string) bool {
	return func(key string) bool {
		d := e.doms.Of(key)
		for i := range pipes {
			if pipes[i].d == d && pipes[i].answer {
				return true
			}
		}
		return false
	}
}

// rollback removes the member from every part that admitted a call that
// as a whole was denied or failed. A removal that fails is queued as an
// undo.
func (e *Engine) rollback(batch []*call) {
	now := time.Now().UnixMicro()
	var owners []*call
	var undos []codec.Undo
	for _, c := range batch {
		if c.mode != opAllow || c.err == nil && c.status == codec.StatusAdmitted {
			continue
		}
		for i, p := range c.parts {
			if p.stat != codec.StatusAdmitted {
				continue
			}
			for _, k := range c.part(i) {
				owners = append(owners, c)
				undos = append(undos, undo.Of(&c.plan, int(k), string(c.member), p.suf, now))
			}
		}
	}
	if len(undos) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	failed, err := e.remove(ctx, undos)
	for _, i := range failed {
		c := owners[i]
		e.log.Warn("engine: rollback failed; retried before the next script call",
			"key", undos[i].Key, "member", undos[i].Member, "err", err)
		if c.err == nil && c.warn == nil {
			c.warn = &backendError{Op: "rollback", Err: err}
		}
		e.undos.Push(undos[i])
	}
}

// crc16Table is the CRC16-XMODEM (CCITT, polynomial 0x1021, initial value
// 0) table Redis Cluster uses to map keys to slots.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crc16Table[byte(c>>8)^s[i]]
	}
	return c
}

// slot returns the Redis Cluster hash slot of key: CRC16 of the hash tag
// (the content of the first {...} when it is not empty) or of the whole
// key, modulo 16384.
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) & 16383
}
