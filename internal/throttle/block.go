package throttle

import (
	"context"
	_ "embed"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/admin"
	"github.com/slidelimit/slidelimit/internal/backenderr"
	"github.com/slidelimit/slidelimit/rules"
)

// blockScript keeps the list of a throttle's learned blocks; its header
// specifies its key, arguments and reply.
//
//go:embed block.lua
var blockSource string

var blockScript = redis.NewScript(blockSource)

// backendErr is the engine's error of operation op failing with err;
// nil for none.
func backendErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return &backenderr.Error{Op: op, Err: err}
}

// heldAtMost notes d, the MaxBlock of a Transport of t: a
// block another process reports is held at most the largest.
func (t *Throttle) heldAtMost(d time.Duration) {
	for {
		cur := t.blockCap.Load()
		if int64(d) <= cur || t.blockCap.CompareAndSwap(cur, int64(d)) {
			return
		}
	}
}

// maxHeld is the longest block t holds a lane for on the word of another
// process or of Redis.
func (t *Throttle) maxHeld() time.Duration {
	if c := t.blockCap.Load(); c > 0 {
		return time.Duration(c)
	}
	return DefaultMaxBlock
}

// heard holds ln for ms, as another process or Redis said, but at most
// maxHeld; ln.mu is held. It reports whether ms was longer: the block's
// key was then written by a process with a longer cap, or by a version
// without one.
func (ln *lane) heard(ms int64) bool {
	d := ln.t.maxHeld()
	over := ms > d.Milliseconds()
	if !over {
		d = time.Duration(ms) * time.Millisecond
	}
	ln.holdUntil(time.Now().Add(d))
	return over
}

// shorten rewrites the block of ln in Redis, found longer than maxHeld,
// to maxHeld: without it, each renewal would read the long block again
// and hold the lane anew.
func (f *fleet) shorten(ln *lane) {
	f.run(ln, "b", 0, f.t.maxHeld().Milliseconds(), 0)
}

// note records, once, the subjects of req, a call of ln, as their
// liftLines: what a Reset and the list of learned blocks name them by. A
// lane keeps no other copy of its subjects' values for it.
func (ln *lane) note(req *engine.Request) {
	if ln.liftLines.Load() != nil {
		return
	}
	lines := make([]string, 0, len(req.Checks))
	for _, c := range req.Checks {
		if l := liftLine(ruleName(c.Rule), c.Subject); !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	ln.liftLines.CompareAndSwap(nil, &lines)
}

// lines returns the liftLines of ln's subjects, each once; nil before its
// first call.
func (ln *lane) lines() []string {
	if l := ln.liftLines.Load(); l != nil {
		return *l
	}
	return nil
}

// ruleName is l's ID without its cost: a Reset of any cost of a
// rule lifts the blocks of its subjects.
func ruleName(l rules.Rule) string {
	return rules.Rule{Kind: l.Kind, Name: l.Name}.ID()
}

// liftLine names a subject in the list of learned blocks and in the
// messages that lift them: the rule's ID and the subject's
// fingerprint (the operator page's), never the subject itself, which may
// be the API key the calls are made with.
func liftLine(limiter, subject string) string {
	return limiter + " " + admin.Fingerprint(subject)
}

// blocksKey is the list of t's learned blocks.
func (f *fleet) blocksKey() string {
	return f.prefix + "throttle:{" + f.t.name + "}:blocks"
}

// blockKey is the block key of the lane named id (turn.lua's
// KEYS[3]).
func (f *fleet) blockKey(id string) string {
	return f.keys(&lane{id: id})[2]
}

// listBlock adds ln's block of ms to the list of learned blocks, with
// its subjects, so that a Reset of one of them finds it.
func (f *fleet) listBlock(ln *lane, ms int64) {
	lines := ln.lines()
	if f.client == nil || len(lines) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	member := ln.id + "\n" + strings.Join(lines, "\n")
	_ = blockScript.Run(ctx, f.client, []string{f.blocksKey()}, "a", member, ms).Err() // the block holds without it
}

// unblock ends, in this process, the blocks of t's lanes that have the
// subject of line.
func (t *Throttle) unblock(line string) {
	t.mu.Lock()
	lanes := make([]*lane, 0, len(t.lanes))
	for _, ln := range t.lanes {
		lanes = append(lanes, ln)
	}
	t.mu.Unlock()
	for _, ln := range lanes {
		if !slices.Contains(ln.lines(), line) {
			continue
		}
		ln.mu.Lock()
		if !ln.blocked.IsZero() {
			ln.blocked = time.Time{}
			ln.signalHead()
		}
		ln.mu.Unlock()
	}
}

// LiftSubject ends the learned blocks of every lane with subject of
// rule l, in every process (lift).
func (t *Throttle) LiftSubject(ctx context.Context, l rules.Rule, subject string) error {
	_, err := t.lift(ctx, liftLine(ruleName(l), subject))
	return err
}

// LiftRef ends the learned blocks of every lane whose subject of rule
// l has the operator page's fingerprint ref, in every process (lift). It
// reports whether Redis listed one.
func (t *Throttle) LiftRef(ctx context.Context, l rules.Rule, ref string) (bool, error) {
	n, err := t.lift(ctx, ruleName(l)+" "+ref)
	return n > 0, err
}

// lift ends the learned blocks of every lane that has the subject of
// line, in every process: in Redis (the lanes' block keys, found in the
// list of learned blocks), in the other processes by a message on the
// throttle's channel, and here, last, so that no reply read before the
// keys went holds a lane again. It returns how many lanes Redis listed
// as blocked.
func (t *Throttle) lift(ctx context.Context, line string) (int, error) {
	defer t.unblock(line)
	f := t.fleet
	if f.client == nil {
		return 0, nil
	}
	ids, err := blockScript.Run(ctx, f.client, []string{f.blocksKey()}, "l", line).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, backendErr("lift learned blocks", err)
	}
	pipe := t.client.Pipeline()
	for _, id := range ids {
		pipe.Del(ctx, f.blockKey(id))
	}
	pipe.Publish(ctx, f.channel, "u|"+line)
	if _, err := pipe.Exec(ctx); err != nil {
		return len(ids), backendErr("lift learned blocks", err)
	}
	return len(ids), nil
}

// LearnedBlocks lists t's learned blocks in force, fleet-wide.
func (t *Throttle) LearnedBlocks(ctx context.Context) ([]admin.LearnedBlock, error) {
	f := t.fleet
	if f.client == nil {
		return nil, nil
	}
	res, err := blockScript.Run(ctx, f.client, []string{f.blocksKey()}, "s").StringSlice()
	if err != nil || len(res) == 0 {
		if errors.Is(err, redis.Nil) {
			err = nil
		}
		return nil, backendErr("list learned blocks", err)
	}
	now, _ := strconv.ParseFloat(res[0], 64)
	var out []admin.LearnedBlock
	for i := 1; i+1 < len(res); i += 2 {
		end, err := strconv.ParseFloat(res[i+1], 64)
		lines := strings.Split(res[i], "\n")
		if err != nil || end <= now || len(lines) < 2 {
			continue
		}
		b := admin.LearnedBlock{Throttle: t.name, Left: (end - now) / 1000}
		for _, l := range lines[1:] {
			if lim, fp, ok := strings.Cut(l, " "); ok {
				b.Subjects = append(b.Subjects, admin.LearnedSubject{Rule: lim, Fingerprint: fp})
			}
		}
		out = append(out, b)
	}
	return out, nil
}

// LearnedBlocksOf lists the learned blocks of ts, fleet-wide: once per
// name, as throttles of one name share their list.
func LearnedBlocksOf(ctx context.Context, ts []*Throttle) ([]admin.LearnedBlock, error) {
	var out []admin.LearnedBlock
	seen := map[string]bool{}
	for _, t := range ts {
		if seen[t.name] {
			continue
		}
		seen[t.name] = true
		b, err := t.LearnedBlocks(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}
