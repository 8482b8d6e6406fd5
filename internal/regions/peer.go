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
	// sending is set while a batch is in flight (see flushUntil).
	sending bool
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
// least every Every, at once when one is full. A failed batch is sent
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
			if sent < pr.r.cfg.Batch {
				break
			}
		}
	}
}

// sendOne sends the head of the queue, up to a batch, and pops it once
// the peer has applied it. It returns how many entries it sent.
func (pr *peer) sendOne(ctx context.Context) (int, error) {
	pr.mu.Lock()
	n := min(len(pr.queue), pr.r.cfg.Batch)
	if n == 0 || pr.sending {
		pr.mu.Unlock()
		return 0, nil
	}
	batch := slices.Clone(pr.queue[:n]) // the queue's array is cleared as it moves on
	pr.sending = true
	pr.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	err := apply(ctx, pr.client, batch)
	cancel()

	pr.mu.Lock()
	pr.sending = false
	if err == nil {
		clear(pr.queue[:n])
		pr.queue = pr.queue[n:]
	}
	pr.mu.Unlock()
	pr.noteReach(err)
	if err != nil {
		return 0, err
	}
	pr.r.acked(batch)
	return n, nil
}

// noteReach logs a peer that becomes unreachable, once, and once when it
// is back.
func (pr *peer) noteReach(err error) {
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
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		sent, err := pr.sendOne(ctx)
		cancel()
		if err != nil {
			return
		}
		if sent == 0 {
			pr.mu.Lock()
			idle := len(pr.queue) == 0 || !pr.sending
			empty := len(pr.queue) == 0
			pr.mu.Unlock()
			if empty {
				return
			}
			if idle {
				continue
			}
			time.Sleep(time.Millisecond) // the sender's batch is in flight
		}
	}
}
