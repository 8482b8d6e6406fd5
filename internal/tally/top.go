package tally

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/backenderr"
	"github.com/slidelimit/slidelimit/internal/keyparts"
)

// TopDenied returns the n (scope, rule, subject) entries denied most in
// the last since, fleet-wide, most denied first (then by scope, rule and
// subject). since must be between 1 s and an hour; it is rounded up to
// whole buckets of 10 s (up to 5 min) or 1 min (beyond), and the bucket in
// progress is included, so a 1 min view covers 60 to 70 s. Denials of the
// last period of Start are not written yet. n <= 0 returns every entry
// kept. TopDenied reads Redis with one pipeline, also when this process
// counts nothing (its tallies not started); it fails with an error
// matching engine.ErrInvalid for a bad since and engine.ErrBackend when
// Redis does, at once (wrapping the engine's error of a server not asked) while the engine
// considers a single server down.
func (t *Tallies) TopDenied(ctx context.Context, since time.Duration, n int) ([]Denials, error) {
	if since < time.Second || since > keep {
		return nil, fmt.Errorf("%w: tally period %s is not between 1s and %s", engine.ErrInvalid, since, keep)
	}
	if t.store.Down() {
		// Known down (see engine/internal/health): through the pool, each
		// operator page view would wait for its deadline and go-redis
		// would log a failed dial per retry of the pipeline.
		return nil, &backenderr.Error{Op: "tally", Err: backenderr.ErrNotAsked}
	}
	span := coarseBucket
	if since <= fineSpan {
		span = fineBucket
	}
	buckets := int((since + span - 1) / span)
	now := t.store.Now()
	ctx, cancel := context.WithTimeout(ctx, max(t.store.Timeout, time.Second))
	defer cancel()
	pipe := t.store.Client.Pipeline()
	cmds := make([]*redis.ZSliceCmd, 0, buckets+1)
	for i := 0; i <= buckets; i++ {
		key := string(t.bucketKey(nil, span, now.Add(-time.Duration(i)*span)))
		cmds = append(cmds, pipe.ZRangeWithScores(ctx, key, 0, -1))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, &backenderr.Error{Op: "tally", Err: err}
	}
	sums := map[string]int64{}
	for _, c := range cmds {
		for _, z := range c.Val() {
			if m, ok := z.Member.(string); ok {
				sums[m] += int64(z.Score)
			}
		}
	}
	out := make([]Denials, 0, len(sums))
	for m, sum := range sums {
		if d, ok := t.parseMember(m); ok && sum > 0 {
			d.Denied = sum
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b Denials) int {
		if a.Denied != b.Denied {
			if a.Denied > b.Denied {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Scope+"\x00"+a.Rule+"\x00"+a.Subject, b.Scope+"\x00"+b.Rule+"\x00"+b.Subject)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// parseMember reads a member written by member.
func (t *Tallies) parseMember(m string) (Denials, bool) {
	parts := strings.Split(m, "|")
	if len(parts) != 3 {
		return Denials{}, false
	}
	var d Denials
	var ok1, ok2, ok3 bool
	d.Scope, ok1 = keyparts.Unescape(parts[0])
	d.Rule, ok2 = keyparts.Unescape(parts[1])
	d.Subject, ok3 = keyparts.Unescape(parts[2])
	if !ok1 || !ok2 || !ok3 {
		return Denials{}, false
	}
	if strings.HasPrefix(parts[2], "#") { // '#' is escaped in raw subjects
		d.Hashed, d.Hash = true, d.Subject
		t.namesMu.Lock()
		n, ok := t.names[parts[2]]
		t.namesMu.Unlock()
		if ok {
			d.Subject, d.Hashed, d.Truncated = n.shown, false, n.cut
		}
	}
	return d, true
}
