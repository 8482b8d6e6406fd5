package regions

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// pipelines counts a client's pipelines and the script calls in each.
type pipelines struct {
	mu    sync.Mutex
	calls []int
}

func (h *pipelines) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		for _, c := range cmds {
			if name := strings.ToLower(c.Name()); strings.HasPrefix(name, "eval") {
				n++
			}
		}
		if n > 0 { // go-redis's own pipelines hold none
			h.mu.Lock()
			h.calls = append(h.calls, n)
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// TestTripCarriesSeveralBatches checks that one round trip to a peer
// carries up to tripCalls script calls of Batch entries each, in one
// pipeline: a replicator whose queue outgrows a batch per round trip
// would fall behind a busy region for as long as it stays busy (before,
// 21,000 admissions a second against 512 entries per 80 ms round trip
// left 56,000 entries queued after 10 s).
func TestTripCarriesSeveralBatches(t *testing.T) {
	_, peerClient := redistest.Mini(t)
	hook := &pipelines{}
	peerClient.AddHook(hook)
	const batch = 4
	r := &Replicator{cfg: Config{Batch: batch, Every: time.Hour, Queue: 1 << 10, Log: slog.Default()}, stable: make(chan []*pending, 64)}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	defer r.cancel()
	pr := &peer{name: "us", client: peerClient, r: r, wake: make(chan struct{}, 1)}
	pr.reachable.Store(true)
	now := time.Now().UnixMicro()
	total := tripCalls*batch + 10
	for i := range total {
		p := &pending{Entry: Entry{Key: fmt.Sprintf("k%d", i), Member: "m", Stamp: now, Keep: int64(time.Minute / time.Microsecond)}}
		p.left.Store(1)
		pr.queue = append(pr.queue, p)
	}
	ctx := context.Background()
	if n, err := pr.sendOne(ctx); err != nil || n != tripCalls*batch {
		t.Fatalf("first trip sent %d, %v; want %d", n, err, tripCalls*batch)
	}
	if n, err := pr.sendOne(ctx); err != nil || n != 10 {
		t.Fatalf("second trip sent %d, %v; want 10", n, err)
	}
	if len(pr.queue) != 0 {
		t.Fatalf("%d entries left queued", len(pr.queue))
	}
	hook.mu.Lock()
	got := fmt.Sprint(hook.calls)
	hook.mu.Unlock()
	// The first trip finds the script missing and is sent again in full.
	if want := fmt.Sprint([]int{tripCalls, tripCalls, 3}); got != want {
		t.Errorf("script calls per pipeline %s, want %s", got, want)
	}
	for i := range total {
		if c := entries(peerClient, fmt.Sprintf("k%d", i)); c != 1 {
			t.Fatalf("peer key k%d holds %d entries, want 1", i, c)
		}
	}
	// Every entry was acknowledged: the stabilizer got them all.
	acked := 0
	for len(r.stable) > 0 {
		acked += len(<-r.stable)
	}
	if acked != total {
		t.Errorf("%d entries acknowledged, want %d", acked, total)
	}
}

// TestApplyEpochs checks that a peer keeps a key's bookkeeping once per
// epoch (an eighth of keep): a second batch in the same epoch leaves the
// key's expiry alone, a batch of the next epoch extends it and trims
// what left the retention, and a new key gets its expiry at once.
func TestApplyEpochs(t *testing.T) {
	_, c := redistest.StartClient(t)
	ctx := context.Background()
	const keep = int64(8 * time.Second / time.Microsecond) // epochs of 1 s
	epoch := time.Now().UnixMicro()/1_000_000*1_000_000 + 2_000_000
	add := func(batch ...*pending) {
		t.Helper()
		if _, err := apply(ctx, c, batch, 0, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(m string, stamp int64) *pending {
		return &pending{Entry: Entry{Key: "k", Member: m, Stamp: stamp, Keep: keep}}
	}
	add(entry("a", epoch))
	ttl := c.PTTL(ctx, "k").Val()
	if want := time.Duration(keep+keep/8)*time.Microsecond + time.Second; ttl <= 0 || ttl > want {
		t.Fatalf("a new key expires in %v, want within %v", ttl, want)
	}
	time.Sleep(50 * time.Millisecond)
	add(entry("old", epoch-keep-1), entry("b", epoch+500_000)) // the same epoch
	if got := c.PTTL(ctx, "k").Val(); got >= ttl {
		t.Errorf("a batch in the same epoch moved the expiry from %v to %v", ttl, got)
	}
	if n := entries(c, "k"); n != 3 {
		t.Errorf("the key holds %d entries before the next epoch, want 3 (no trim within one)", n)
	}
	add(entry("c", epoch+1_000_000)) // the next epoch
	if got := c.PTTL(ctx, "k").Val(); got < ttl {
		t.Errorf("a batch of the next epoch left the expiry at %v, want at least %v", got, ttl)
	}
	if m := c.ZRangeByScore(ctx, "k", &redis.ZRangeBy{Min: "0", Max: "+inf"}).Val(); fmt.Sprint(m) != "[a b c]" {
		t.Errorf("after the next epoch's trim the key holds %v, want [a b c]", m)
	}
}

// TestReplicationKeepsUpAcrossSlowLink queues, at once, more entries than
// a few batches for a peer 400 ms away (a proxy delays each direction
// 200 ms) and checks that every one is acknowledged within 2 s: a
// replicator that sent one batch per round trip needed 12 of them here
// (4.8 s), and at a steady rate above a batch per round trip it fell
// behind for good.
func TestReplicationKeepsUpAcrossSlowLink(t *testing.T) {
	_, local := redistest.StartClient(t)
	peerSrv := redistest.Start(t)
	proxy := redistest.StartProxy(t, peerSrv.Addr, 200*time.Millisecond, 200*time.Millisecond)
	far := redis.NewClient(&redis.Options{Addr: proxy.Addr, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { far.Close() })
	r := New(Config{Local: local, Peers: map[string]Client{"far": far}})
	t.Cleanup(r.Close)
	const n = 12 * 512
	now := time.Now().UnixMicro()
	keep := int64(time.Minute / time.Microsecond)
	acked := func() bool {
		s := r.Stats()[0]
		return s.Queue == 0 && s.Lag == 0
	}
	// A first entry makes the connection and loads the script (a few
	// round trips), which the timing below leaves out.
	r.Add(Entry{Key: "warm", Member: "m", Stamp: now, Keep: keep})
	redistest.Eventually(t, "the first entry acknowledged", acked)
	start := time.Now()
	for i := range n {
		r.Add(Entry{Key: "k" + strconv.Itoa(i), Member: "m", Stamp: now, Keep: keep})
	}
	redistest.Eventually(t, "every entry acknowledged", acked)
	took := time.Since(start)
	t.Logf("%d entries acknowledged in %v", n, took)
	if took > 2*time.Second {
		t.Errorf("%d entries took %v to reach a peer 400 ms away, want within 2 s", n, took)
	}
	if got := entries(peerSrv.Client(), "k"+strconv.Itoa(n-1)); got != 1 {
		t.Errorf("the last entry's key holds %d entries on the peer, want 1", got)
	}
}
