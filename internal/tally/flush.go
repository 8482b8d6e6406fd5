package tally

import (
	"context"
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/internal/backenderr"
	"github.com/slidelimit/slidelimit/internal/keyparts"
	"github.com/slidelimit/slidelimit/rules"
)

// Start runs the goroutine that writes the tallies every period (between
// MinFlush and MaxFlush), until Close. It is called at most once.
func (t *Tallies) Start(every time.Duration) {
	t.stop, t.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(t.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var keys []key
		var counts []int64
		for {
			select {
			case <-t.stop:
				return
			case <-tick.C:
				keys, counts = t.take(keys[:0], counts[:0])
				t.flush(keys, counts)
			}
		}
	}()
}

// Close stops the writer of Start, writes what was counted since its last
// write, and returns when it is done. Denials noted later are not
// written. Close is idempotent; without Start it writes nothing.
func (t *Tallies) Close() {
	t.once.Do(func() {
		if t.stop == nil {
			return
		}
		close(t.stop)
		<-t.done
		keys, counts := t.take(nil, nil)
		t.flush(keys, counts)
	})
}

// bucketKey appends the key of the bucket of span (fineBucket or
// coarseBucket) holding time at.
func (t *Tallies) bucketKey(b []byte, span time.Duration, at time.Time) []byte {
	b = append(b, t.store.Prefix...)
	b = append(b, "{tally}:"...)
	if span == fineBucket {
		b = append(b, "10s:"...)
	} else {
		b = append(b, "1m:"...)
	}
	return strconv.AppendInt(b, at.UnixNano()/int64(span), 10)
}

// flush writes one period's entries to the current buckets in one
// pipeline: ZINCRBY each, then trim each bucket to its bucketTop most
// denied entries and set its expiry. A failed write is dropped (and
// counted); the first failure after a success is logged, and so is the
// success that ends a run of failures.
func (t *Tallies) flush(keys []key, counts []int64) {
	if len(keys) == 0 {
		return
	}
	defer clear(keys) // drop the entries' strings
	var total int64
	for _, n := range counts {
		total += n
	}
	if t.store.Down() {
		// Known down (see engine/internal/health): no dial, no wait, as for
		// decisions.
		t.writeFailed(total, backenderr.ErrNotAsked)
		return
	}
	t.remember(keys)
	now := t.store.Now()
	fine := string(t.bucketKey(nil, fineBucket, now))
	coarse := string(t.bucketKey(nil, coarseBucket, now))
	members := make([]string, len(keys))
	var member []byte
	for i, k := range keys {
		member = t.member(member[:0], k)
		members[i] = string(member)
	}
	// The deadline covers the Redis call only: what comes before takes
	// time that grows with the entries, never with their subjects' size.
	ctx, cancel := context.WithTimeout(context.Background(), t.store.Timeout)
	defer cancel()
	pipe := t.store.Client.Pipeline()
	for i, m := range members {
		pipe.ZIncrBy(ctx, fine, float64(counts[i]), m)
		pipe.ZIncrBy(ctx, coarse, float64(counts[i]), m)
	}
	for _, key := range []string{fine, coarse} {
		pipe.ZRemRangeByRank(ctx, key, 0, -bucketTop-1)
	}
	pipe.PExpire(ctx, fine, fineSpan+2*fineBucket)
	pipe.PExpire(ctx, coarse, keep+2*coarseBucket)
	if _, err := pipe.Exec(ctx); err != nil {
		t.writeFailed(total, err)
		return
	}
	if t.failing.Swap(false) {
		t.store.Log.Info("slidelimit: denial tallies are written again", "dropped", t.failed.Load())
	}
}

// writeFailed counts n denials whose write failed with err, and logs the
// first failure after a success.
func (t *Tallies) writeFailed(n int64, err error) {
	failed := t.failed.Add(n)
	if !t.failing.Swap(true) {
		t.store.Log.Warn("slidelimit: denial tallies cannot be written to Redis; dropping them until it answers",
			"error", err, "dropped", failed)
	}
}

// member appends the member of k in a bucket: the escaped scope, rule
// ID and subject, separated by '|' (which escaping removes from each). A
// subject the keys store hashed is stored hashed here too (its '#' marks
// it: escaping removes it from subjects stored as is).
func (t *Tallies) member(b []byte, k key) []byte {
	b = keyparts.AppendEscaped(b, k.scope)
	b = append(b, '|')
	b = keyparts.AppendEscaped(b, rules.Rule{Kind: k.kind, Name: k.name, Cost: k.cost}.ID())
	b = append(b, '|')
	if k.hashed {
		return append(b, k.subject...)
	}
	return keyparts.AppendEscaped(b, k.subject)
}

// remember records what to show of the hashed subjects of keys, for
// TopDenied: at most maxNames of them, each at most 128 bytes.
func (t *Tallies) remember(keys []key) {
	t.namesMu.Lock()
	defer t.namesMu.Unlock()
	for _, k := range keys {
		if !k.hashed || k.shown == "" {
			continue
		}
		if _, ok := t.names[k.subject]; !ok && len(t.names) >= maxNames {
			clear(t.names) // forget the oldest by forgetting all: bounded, and rare
		}
		t.names[k.subject] = shownName{shown: k.shown, cut: k.cut}
	}
}
