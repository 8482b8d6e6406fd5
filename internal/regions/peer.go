package regions

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// peer is one peer region: its queue, in the order entries were made, and
// the goroutine that sends it.
type peer struct {
	name      string
	client    Client
	r         *Replicator
	wake      chan struct{}
	reachable atomic.Bool

	mu      sync.Mutex
	queue   []*pending
	dropped int64

	// send is held by the one goroutine sending (run, or Close's flush),
	// and guards what follows.
	send sync.Mutex

	// Catching up after a partition (see BehindKey). behind: the local
	// Redis says to the peer that this process has entries it could not
	// send (only the watcher touches it). held: entries the peer applied
	// while it said it was behind this region, whose acknowledgement
	// waits until it has caught up (only the goroutine holding send
	// touches it).
	behind bool
	held   []*pending
}

// push queues p unless the queue is full, and wakes the sender when a
// batch is full.
func (pr *peer) push(p *pending) bool {
	pr.mu.Lock()
	if len(pr.queue) >= pr.r.cfg.Queue {
		pr.dropped++
		pr.mu.Unlock()
		return false
	}
	pr.queue = append(pr.queue, p)
	full := len(pr.queue) >= pr.r.cfg.Batch
	pr.mu.Unlock()
	if full {
		select {
		case pr.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// run sends the queue in batches until the replicator stops: a batch at
// least every Every, at once when one is full, and up to tripCalls
// batches in one round trip while more wait. A failed batch is sent
// again, after a pause that doubles up to a second.
func (pr *peer) run() {
	defer pr.r.wg.Done()
	tick := time.NewTicker(pr.r.cfg.Every)
	defer tick.Stop()
	pause := time.Duration(0)
	for {
		select {
		case <-pr.r.stop:
			return
		case <-tick.C:
		case <-pr.wake:
		}
		if pause > 0 {
			select {
			case <-pr.r.stop:
				return
			case <-time.After(pause):
			}
		}
		for {
			sent, err := pr.sendOne(pr.r.ctx)
			if err != nil {
				pause = min(max(2*pause, pr.r.cfg.Every), backoff)
				break
			}
			pause = 0
			if sent < pr.trip() {
				break
			}
		}
	}
}

// trip is the most entries one round trip carries.
func (pr *peer) trip() int { return tripCalls * pr.r.cfg.Batch }

// sendOne sends the head of the queue, up to a round trip's entries, and
// pops it once the peer has applied it. It returns how many entries it
// sent.
func (pr *peer) sendOne(ctx context.Context) (int, error) {
	if !pr.send.TryLock() {
		return 0, nil // another goroutine is sending
	}
	defer pr.send.Unlock()
	pr.mu.Lock()
	n := min(len(pr.queue), pr.trip())
	batch := slices.Clone(pr.queue[:n]) // the queue's array is cleared as it moves on
	pr.mu.Unlock()
	if n == 0 && len(pr.held) == 0 {
		return 0, nil
	}

	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	peerBehind, err := apply(ctx, pr.client, batch, pr.r.cfg.Batch, pr.r.behindKey(pr.r.cfg.Name), pr.r.cfg.Invalidate)
	cancel()

	pr.mu.Lock()
	if err == nil {
		clear(pr.queue[:n])
		pr.queue = pr.queue[n:]
	}
	pr.mu.Unlock()
	pr.noteReach(err)
	if err != nil {
		return 0, err
	}
	if peerBehind {
		// The peer has not sent this region what it admitted while they
		// were apart: this region's entries stay unstable until it has.
		pr.held = append(pr.held, batch...)
		return n, nil
	}
	if len(pr.held) > 0 {
		batch, pr.held = append(pr.held, batch...), nil
	}
	pr.r.acked(batch)
	return n, nil
}

// mark keeps the local Redis's flag that this region is behind with the
// peer (see BehindKey): set while its oldest unsent entry is older than
// behindAfter (a partition, a slow link), written again at every look
// while it waits, removed once the queue has drained. Only the watcher calls it. Failures
// to write are ignored: the flag expires.
func (pr *peer) mark(now time.Time) {
	pr.mu.Lock()
	late := len(pr.queue) > 0 && now.Sub(pr.queue[0].queued) > behindAfter
	empty := len(pr.queue) == 0
	pr.mu.Unlock()
	set := late || pr.behind && !empty
	if !set && !(pr.behind && empty) {
		return
	}
	// Written at each look while set: another process of the region may
	// delete the flag once its own queue has drained.
	pr.behind = set
	ctx, cancel := context.WithTimeout(pr.r.ctx, callTimeout)
	defer cancel()
	pipe := pr.r.cfg.Local.Pipeline()
	if set {
		pipe.Set(ctx, pr.r.behindKey(pr.name), "1", behindTTL)
	} else {
		pipe.Del(ctx, pr.r.behindKey(pr.name))
	}
	_, _ = pipe.Exec(ctx)
}

// noteReach logs a peer that becomes unreachable, once, and once when it
// is back. A call that Close cut short says nothing of the peer.
func (pr *peer) noteReach(err error) {
	if err != nil && pr.r.ctx.Err() != nil {
		return
	}
	up := err == nil
	if pr.reachable.Swap(up) == up {
		return
	}
	if up {
		pr.r.cfg.Log.Info("regions: peer region reachable again", "region", pr.name)
	} else {
		pr.r.cfg.Log.Warn("regions: peer region unreachable; its entries wait in memory", "region", pr.name, "err", err)
	}
}

// flushUntil sends the queue until it is empty, a send fails or the
// deadline passes.
func (pr *peer) flushUntil(deadline time.Time) {
	for time.Now().Before(deadline) {
		pr.mu.Lock()
		empty := len(pr.queue) == 0
		pr.mu.Unlock()
		if empty {
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		sent, err := pr.sendOne(ctx)
		cancel()
		if err != nil {
			return
		}
		if sent == 0 {
			time.Sleep(time.Millisecond) // the sender's batch is in flight
		}
	}
}
