package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/denials"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/keyparts"
	"github.com/slidelimit/slidelimit/internal/regions"
	"github.com/slidelimit/slidelimit/rules"
)

// ResetRequest resets every check of req as Reset resets one: its Rule,
// Subject and Hashed, in req's Scope. Without WithRegions, or for a
// Regional request, that is all. With WithRegions, a request that is not
// Regional resets its sliding windows in every region: this region writes
// a reset floor, its Redis clock when it cleared the subject's count key,
// and the peers drop every entry of that key stamped at or before the
// floor, when the reset reaches them (the replication lag) and whenever
// such an entry arrives later; a block that started at or before the
// floor is lifted everywhere (docs/regions.md, Reset across regions).
// In-flight windows are reset in this region only. Errors are Reset's,
// joined.
func (e *Engine) ResetRequest(ctx context.Context, req Request) error {
	var errs []error
	for i := range req.Checks {
		c := &req.Checks[i]
		var err error
		if e.rep != nil && !req.Regional && sliding(&c.Rule) {
			err = e.resetShared(ctx, req.Scope, c)
		} else {
			err = e.reset(ctx, req.Scope, c.Rule, c.Subject, c.Hashed)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sliding reports whether l has a window counted over time, and returns
// its longest period: the count key a shared request replicates.
func sliding(l *rules.Rule) bool { return longestPeriod(l) > 0 }

// longestPeriod returns the longest period of l's windows, in µs (0: none
// but in-flight and calendar windows).
func longestPeriod(l *rules.Rule) int64 {
	var p time.Duration
	for _, w := range l.Windows {
		if !w.Concurrent {
			p = max(p, w.Period)
		}
	}
	return int64(p / time.Microsecond)
}

// resetShared resets check c in scope in this region and queues the
// reset for the peers: the count key gets its floor (regions.Reset), its
// block key is lifted, the other keys (an in-flight window's slots) are
// deleted here only, and every process of the region forgets what it
// cached of them, as reset does.
func (e *Engine) resetShared(ctx context.Context, scope string, c *Check) error {
	l := &c.Rule
	if c.Hashed && !keyparts.IsStoredHash(c.Subject) {
		return fmt.Errorf("%w: %q is not a stored hash", ErrInvalid, c.Subject)
	}
	key := string(e.keyer.AppendKeyOf(nil, scope, l.Kind, l.Name, plan.KeyCost(l), c.Subject, c.Hashed))
	keys := []string{key}
	for _, w := range l.Windows {
		if w.Concurrent {
			keys = append(keys, string(e.keyer.AppendKeyOf(nil, scope, l.Kind, l.Name, "", c.Subject, c.Hashed))+plan.SlotSuffix)
			break
		}
	}
	keys = append(keys, e.keyer.CalResetKeys(scope, l, c.Subject, c.Hashed)...)
	for _, k := range keys {
		e.local.Forget(k)
	}
	if e.closed.Load() {
		return ErrClosed
	}
	e.async.Drain(false) // as in reset: a queued finish could write again
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	keep, block := longestPeriod(l), int64(max(c.Block, 0)/time.Microsecond)
	floor, err := regions.Reset(ctx, e.client, key, plan.BlockKey(key), keep, block)
	if err != nil {
		return &backendError{Op: "reset", Err: err}
	}
	if len(keys) > 1 {
		pipe := e.client.Pipeline()
		for _, k := range keys[1:] {
			pipe.Del(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return &backendError{Op: "reset", Err: err}
		}
	}
	e.publish(ctx, denials.Reset, keys...)
	e.rep.Add(regions.Entry{Key: key, Stamp: floor, Keep: keep, Reset: true})
	if block > 0 {
		e.rep.Add(regions.Entry{Key: plan.BlockKey(key), Stamp: floor, Keep: block, Reset: true, Block: true})
	}
	return nil
}

// invalidation returns the command that makes a peer's processes forget
// what they cached of keys, as a reset here does (see publishCmd): the
// peers share the key prefix, so their channel's name is this engine's.
func (e *Engine) invalidation(keys []string) []any {
	return []any{"publish", e.channel(), string(rune(denials.Reset)) + strings.Join(keys, " ")}
}
