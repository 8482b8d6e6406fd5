package throttle

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/slidelimit/slidelimit/engine"
)

// ErrNoCalls is the error of WaitAny given no calls.
var ErrNoCalls = errors.New("slidelimit: WaitAny needs at least one call")

// WaitAny blocks until one of calls fits, counts it, and returns its
// Permit and index. The others count nothing once it returns. A call
// whose lane holds an upstream's block is not asked until the block ends.
// A call's error comes with its index before any call is asked; when ctx
// ends first WaitAny returns ctx.Err() and -1, having counted nothing.
func (t *Throttle) WaitAny(ctx context.Context, calls ...Call) (*Permit, int, error) {
	if len(calls) == 0 {
		return nil, -1, t.cfg.ConfigError(fmt.Errorf("%w: %w", ErrCall, ErrNoCalls))
	}
	if err := ctx.Err(); err != nil {
		return nil, -1, err
	}
	p := t.plan()
	reqs := make([]engine.Request, len(calls))
	names := make([][]string, len(calls))
	flows := make([]*flow, len(calls))
	for i, c := range calls {
		var err error
		if reqs[i], names[i], err = p.request(ctx, c); err != nil {
			return nil, i, err
		}
		flows[i] = p.flowOf(c, &reqs[i])
	}
	if len(calls) == 1 {
		pm, err := t.counted(p, calls[0].Class, func() (*Permit, error) { return t.wait(ctx, p, &reqs[0], names[0], flows[0]) })
		switch {
		case err == nil:
			return pm, 0, nil
		case ctx.Err() != nil:
			return nil, -1, err
		}
		return nil, 0, err
	}
	// Every call waits in its own lane, as a caller of Wait would; the
	// first admitted wins and the others are cancelled. A call admitted
	// in the race and not chosen is given back as a cancelled Wait's is.
	race, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		won    *Permit
		wonAt  = -1
		failed error
		failAt = -1
	)
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pm, err := t.counted(p, calls[i].Class, func() (*Permit, error) { return t.wait(race, p, &reqs[i], names[i], flows[i]) })
			mu.Lock()
			lost := false
			switch {
			case pm != nil && won == nil && failed == nil:
				won, wonAt = pm, i
				cancel()
			case pm != nil:
				lost = true
			case failed == nil && won == nil && race.Err() == nil:
				// Not the race's end: an invalid request; the others stop.
				failed, failAt = err, i
				cancel()
			}
			mu.Unlock()
			if lost {
				pm.cancel()
			}
		}()
	}
	wg.Wait()
	switch {
	case won != nil:
		return won, wonAt, nil
	case failed != nil:
		return nil, failAt, failed
	}
	return nil, -1, ctx.Err()
}

// cancel takes back the call p admitted, which the caller never saw: it
// leaves every window, as the call of a Wait whose context ended.
func (p *Permit) cancel() {
	if !p.done.CompareAndSwap(false, true) {
		return
	}
	if p.hold != nil {
		p.hold.Stop()
	}
	p.leave()
	p.t.giveBack(p.d)
	p.t.stats.admits.Add(-1)
	p.class.unadmit()
	p.t.fleet.kick(p.lane)
	p.t.release(p.lane)
}
