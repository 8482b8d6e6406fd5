package async

import (
	"fmt"
	"testing"
	"time"
)

// testCall is a queued finish or a batch's call, of keys.
type testCall struct {
	keys   []string
	finish bool
}

func (c *testCall) Keys() []string  { return c.keys }
func (c *testCall) Finishing() bool { return c.finish }

// testQueue returns a queue whose finishes are not sent by the timer, and
// ask, which makes an Allow of keys "other" and key.
func testQueue(t *testing.T) (*Queue[*testCall], func(key string) *testCall) {
	t.Helper()
	q := new(Queue[*testCall])
	q.Init(Config[*testCall]{
		Bound:   time.Hour,
		Since:   func() int64 { return 1 },
		Elapsed: func() int64 { return 1 },
		Full:    func() bool { return false },
		Send:    func(*Flight[*testCall]) { t.Error("a flight was sent") },
	})
	t.Cleanup(func() {
		// Not Drain: it would wait for a flight a failed test left sent.
		q.mu.Lock()
		if q.timer != nil {
			q.timer.Stop()
		}
		q.mu.Unlock()
	})
	return q, func(key string) *testCall { return &testCall{keys: []string{"other", key}} }
}

// TestTouches: a cached denial is not made for a key with a finish
// queued or sent (it may free room), and is for other keys.
func TestTouches(t *testing.T) {
	t.Parallel()
	q, ask := testQueue(t)
	fin := &testCall{keys: []string{"k"}}
	if q.Touches(ask("k")) {
		t.Fatal("touches with nothing queued")
	}
	q.Push(fin)
	if !q.Touches(ask("k")) || q.Touches(ask("j")) {
		t.Fatal("queued: touches wrong")
	}
	q.mu.Lock()
	fl := q.detach()
	q.mu.Unlock()
	if fl == nil || !q.Touches(ask("k")) || q.Touches(ask("j")) {
		t.Fatal("sent: touches wrong")
	}
	// Complete it by hand: nothing was sent.
	q.Complete(fl, func(*testCall) {})
	if q.Touches(ask("k")) {
		t.Fatal("touches after completing")
	}
}

// TestTouchesIndexed is TestTouches for a flight of more keys than
// IndexAt, whose keys are indexed: a batch of one of its keys waits for
// it, others do not.
func TestTouchesIndexed(t *testing.T) {
	t.Parallel()
	q, ask := testQueue(t)
	for i := range IndexAt {
		q.Push(&testCall{keys: []string{fmt.Sprint("k", i), fmt.Sprint("x", i)}, finish: true})
	}
	q.mu.Lock()
	fl := q.detach()
	q.mu.Unlock()
	if fl == nil || fl.nkeys <= IndexAt {
		t.Fatalf("flight %+v: want more than %d keys", fl, IndexAt)
	}
	last := fmt.Sprint("x", IndexAt-1)
	if !q.Touches(ask(last)) || !q.Touches(ask("k0")) || q.Touches(ask("j")) {
		t.Fatal("sent: touches wrong")
	}
	q.mu.Lock()
	waitLast := q.conflicts([]*testCall{ask("j"), ask(last)}, nil)
	waitNone := q.conflicts([]*testCall{ask("j"), ask("k")}, nil)
	q.mu.Unlock()
	if len(waitLast) != 1 || len(waitNone) != 0 {
		t.Fatalf("conflicts: %d flights for a batch of its key, want 1; %d for one of others, want 0", len(waitLast), len(waitNone))
	}
	// Complete it by hand: nothing was sent.
	q.Complete(fl, func(*testCall) {})
}
