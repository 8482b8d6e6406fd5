package engine

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestGiveBackFails checks that a give-back Redis cannot run is reported
// and queued, with the request's exact member, for a later batch.
func TestGiveBackFails(t *testing.T) {
	t.Parallel()
	s, rc := redistest.StartClient(t)
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithTimeout(200*ms))
	r := req(user("u", win(5, time.Minute)), ip("1.2.3.4", win(5, time.Minute)))
	d := mustAllow(t, e, r, true)

	s.Kill()
	start := time.Now().UnixMicro()
	err := e.giveBack(context.Background(), r, d)
	end := time.Now().UnixMicro()
	var be *backendError
	if !errors.Is(err, ErrBackend) || !errors.As(err, &be) || be.Op != "giveback" {
		t.Fatalf("GiveBack with Redis down: %v, want a *backendError for giveback", err)
	}
	q := e.undos.Take()
	if len(q) != 2 {
		t.Fatalf("queued %d undos, want 2: %+v", len(q), q)
	}
	for _, u := range q {
		if u.Member != strconv.FormatInt(d.admitted.ID, 10) || u.Suffix != 0 {
			t.Errorf("queued undo %+v, want member %d suffix 0", u, d.admitted.ID)
		}
		// Kept while its entry may count: a minute from when it was
		// queued, which is after the give-back began.
		if lo := start + time.Minute.Microseconds(); u.Until < lo || u.Until > end+time.Minute.Microseconds() {
			t.Errorf("queued undo until %d, want from %d to %d", u.Until, lo, end+time.Minute.Microseconds())
		}
	}
}

// TestGiveBackWhileDown checks that a give-back does not wait for Redis
// while the engine considers it down: the removal is queued at once.
func TestGiveBackWhileDown(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)))
	r := req(user("u", win(5, time.Minute)))
	d := mustAllow(t, e, r, true)
	e.doms.One.Down.Store(true)
	err := e.giveBack(context.Background(), r, d)
	if !errors.Is(err, errNotAsked) || !errors.Is(err, ErrBackend) {
		t.Fatalf("GiveBack while down: %v, want errNotAsked and ErrBackend", err)
	}
	if n := e.undos.Len(); n != 1 {
		t.Fatalf("%d undos queued, want 1", n)
	}
	// Redis answers again: the next batch runs the queued removal after
	// its script call, so the request after it no longer sees d's entry.
	e.doms.One.Down.Store(false)
	if d2 := mustAllow(t, e, r, true); d2.Windows[0].Used != 2 {
		t.Errorf("first request after recovery: used %d, want 2 (d's entry, then its own)", d2.Windows[0].Used)
	}
	if d3 := mustAllow(t, e, r, true); d3.Windows[0].Used != 2 {
		t.Errorf("second request after recovery: used %d, want 2 (d's entry was removed)", d3.Windows[0].Used)
	}
}

func TestGiveBackErrors(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)))
	r := req(user("u", win(5, time.Minute)))
	d := mustAllow(t, e, r, true)
	// The Decision knows its keys: Finish checks what it is given.
	if err := e.Finish(context.Background(), d, Outcome{Actual: []int64{1, 2}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Finish with two actual costs for one check: %v, want ErrInvalid", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.giveBack(ctx, r, d); !errors.Is(err, context.Canceled) {
		t.Errorf("GiveBack with a done context: %v, want context.Canceled", err)
	}
	e.Close()
	if err := e.giveBack(context.Background(), r, d); !errors.Is(err, ErrClosed) {
		t.Errorf("GiveBack after Close: %v, want ErrClosed", err)
	}
	if err := e.giveBack(context.Background(), r, Decision{}); err != nil {
		t.Errorf("GiveBack of a zero Decision: %v, want nil", err)
	}
}
