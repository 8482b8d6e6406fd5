package engine

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/regions"
)

// regionsConfig is what WithRegions configured: this region's name and
// its peers' clients.
type regionsConfig struct {
	local string
	peers map[string]Client
}

// WithRegions makes the engine one region of several that keep one limit
// together (docs/regions.md). Each region decides on its own client, as
// without regions; its admissions (and give-backs, the blocks of
// Check.Block its denials start and the resets of ResetRequest) are then
// replicated in the background to every peer's Redis, and near the limit
// it admits only its share of the headroom its unacknowledged admissions
// leave. local is this region's name; peers maps every other region's
// name to a client of its Redis (any client New takes). Every region must
// run the same set of names. The engine does not own the peers' clients:
// Close leaves them open.
//
// A Request that is not Regional then may count only sliding windows
// without a cost or grain (and in-flight windows, which stay local): a
// cost, a grain, a calendar window or a distinct value make it invalid.
// A denial by the share alone has no Denied window and a RetryAfter of at
// most 250 ms. Close sends what is queued for at most about a second.
//
// An empty local, an empty peer name, local among peers or a nil peer
// client make New fail with an error matching ErrInvalid.
func WithRegions(local string, peers map[string]Client) Option {
	return func(c *config) error {
		if err := checkRegions(local, peers); err != nil {
			return err
		}
		m := make(map[string]Client, len(peers))
		for name, cl := range peers {
			m[name] = cl
		}
		c.regions = &regionsConfig{local: local, peers: m}
		return nil
	}
}

// checkRegions reports the first mistake in WithRegions' arguments.
func checkRegions(local string, peers map[string]Client) error {
	bad := func(reason string) error { return &optionError{Option: "WithRegions", Reason: reason} }
	if local == "" {
		return bad("empty local region name")
	}
	names := make([]string, 0, len(peers))
	for name := range peers {
		names = append(names, name)
	}
	sort.Strings(names) // the first mistake is the same on every run
	for _, name := range names {
		switch {
		case name == "":
			return bad("empty peer region name")
		case name == local:
			return bad("local region " + strconv.Quote(local) + " is among the peers")
		case isNil(peers[name]):
			return bad("nil client for peer region " + strconv.Quote(name))
		}
	}
	return nil
}

// RegionStats is what an engine with regions reports of one peer region
// (see Engine.RegionStats).
type RegionStats struct {
	// Region is the peer's name.
	Region string
	// Lag is the age of the oldest admission the peer has not
	// acknowledged; 0 when it has them all.
	Lag time.Duration
	// Queue is the number of admissions and give-backs waiting to be sent
	// to the peer, in this process's memory.
	Queue int
	// Dropped counts the entries the peer's full queue refused since New:
	// they stay unacknowledged here until they leave their windows.
	Dropped int64
	// Reachable reports whether the last call to the peer succeeded.
	Reachable bool
}

// RegionStats returns the replication figures of every peer region,
// ordered by name, or nil without WithRegions. It is safe for concurrent
// use.
func (e *Engine) RegionStats() []RegionStats {
	if e.rep == nil {
		return nil
	}
	ps := e.rep.Stats()
	out := make([]RegionStats, len(ps))
	for i, p := range ps {
		out[i] = RegionStats{Region: p.Region, Lag: p.Lag, Queue: p.Queue, Dropped: p.Dropped, Reachable: p.Reachable}
	}
	return out
}

// startRegions starts the replicator of cfg's regions, if any.
func (e *Engine) startRegions(cfg *regionsConfig) {
	if cfg == nil {
		return
	}
	peers := make(map[string]regions.Client, len(cfg.peers))
	names := make([]string, 0, len(cfg.peers))
	for name, c := range cfg.peers {
		peers[name] = c
		names = append(names, name)
	}
	r, n := regions.Index(cfg.local, names)
	e.share = plan.Share{Index: r, Regions: n}
	regions.CheckSet(e.client, e.keyer.Prefix()+regions.SetKey, regions.SetHash(cfg.local, names), min(e.timeout, time.Second), e.log)
	e.rep = regions.New(regions.Config{Name: cfg.local, Prefix: e.keyer.Prefix(), Local: e.client, Peers: peers, Log: e.log,
		Invalidate: e.invalidation})
}

// shareKeys makes c's count keys keep copies when the engine has
// regions and req is not regional.
func (e *Engine) shareKeys(c *call, req *Request) error {
	if e.rep == nil || req.Regional {
		return nil
	}
	if err := c.plan.ShareKeys(e.share); err != nil {
		if pe, ok := err.(*plan.Error); ok {
			return (*requestError)(pe)
		}
		return err
	}
	return nil
}

// shared completes the decision d of c, whose plan keeps copies:
// an admission goes to the replicator, and so do the blocks a denial
// started; a denial by the share rule
// waits for the share's room and reports no remaining in the windows it
// may have denied. That wait stays out of c's windows, so the cache of
// denials, which knows full windows, does not hold it: the next request
// asks Redis.
func (e *Engine) shared(c *call, d *Decision) {
	if d.admitted != nil {
		e.replicate(c)
		shareRemaining(&c.plan, d)
		return
	}
	if !d.Allowed {
		e.replicateBlocks(c)
	}
	if !d.Allowed && c.plan.ShareLeft > 0 {
		d.RetryAfter = max(d.RetryAfter, time.Duration(c.plan.ShareLeft)*time.Microsecond)
		shareDenied(&c.plan, d)
	}
}

// shareRemaining caps Remaining in every window of admission d where the
// script of p counted the unstable entries U (R·V > L − R + r, V the count
// before the admission) at what the share leaves: the region admits no
// more there now, min(L − V − 1, share − U − 1).
func shareRemaining(p *plan.Plan, d *Decision) {
	for j := range d.Windows {
		ws := &d.Windows[j]
		if ws.Check >= len(p.KeyOf) || ws.Window.Concurrent {
			continue
		}
		k := p.KeyOf[ws.Check]
		if k < 0 || !p.HasUnstable(int(k)) || p.ShareRoom[k] < 0 {
			continue
		}
		if p.Share.Near(ws.Used-1, ws.Window.Limit) {
			ws.Remaining = min(ws.Remaining, p.ShareRoom[k])
		}
	}
}

// shareDenied sets Remaining to 0 in every window of d that the share
// rule of p may have denied: a window of a key with copies
// whose count V is near its limit L (R·V > L − R + r, below which the
// rule always has room; see lua/mw_regions.lua). The region admits
// nothing more there until an acknowledgement or a departure makes room,
// so a client is not told it may retry at once. Where only a departure
// can (plan.Share.Full), RetryAfter is at least the window's Reset. Denied
// names a window only when it is full.
func shareDenied(p *plan.Plan, d *Decision) {
	for j := range d.Windows {
		ws := &d.Windows[j]
		if ws.Check >= len(p.KeyOf) || ws.Window.Concurrent {
			continue
		}
		k := p.KeyOf[ws.Check]
		if k < 0 || !p.HasUnstable(int(k)) {
			continue
		}
		if p.Share.Near(ws.Used, ws.Window.Limit) {
			ws.Remaining = 0
		}
		if p.Share.Full(ws.Used, ws.Window.Limit) {
			d.RetryAfter = max(d.RetryAfter, ws.Reset)
		}
	}
	// A cached denial names the window the share fills; no window is full.
	if w := &d.Denied; !w.Window.Concurrent && w.Used < w.Window.Limit {
		*w = WindowState{}
	}
}

// replicate hands what c's admission counted in shared keys to the
// replicator: one entry per count key with copies.
func (e *Engine) replicate(c *call) {
	p := &c.plan
	member := string(c.member)
	if c.suffix > 0 {
		member += "." + strconv.FormatInt(c.suffix, 10)
	}
	stamp := c.sec*1_000_000 + c.usec
	for k, key := range p.Keys {
		if p.HasUnstable(k) {
			keep := p.Wins[p.WinStart[k]].Period // longest first
			e.rep.Add(regions.Entry{Key: strings.Clone(key), Member: member, Stamp: stamp, Keep: keep})
		}
	}
}

// replicateBlocks hands the blocks c's denial started in shared keys to
// the replicator: a block whose time left is its whole length (Check.Block)
// started in this call. The peers then block the subject until the same
// end, by this region's clock.
func (e *Engine) replicateBlocks(c *call) {
	p := &c.plan
	if p.Blocked == 0 || len(c.bleft) < len(p.Keys) {
		return
	}
	at := c.sec*1_000_000 + c.usec
	for k, key := range p.Keys {
		if b := p.BlockOf(k); b > 0 && c.bleft[k] == b && p.HasUnstable(k) {
			e.rep.Add(regions.Entry{Key: plan.BlockKey(key), Stamp: at + b, Keep: b, Block: true})
		}
	}
}

// replicateGiveBack hands the removals of a give-back that succeeded to
// the replicator: a peer's ZREM of a member it lacks changes nothing, so
// regional keys' removals are sent too.
func (e *Engine) replicateGiveBack(fin []codec.Undo) {
	for i := range fin {
		u := &fin[i]
		if u.Kind != codec.KindCount || u.Suffix < 0 {
			continue
		}
		member := u.Member
		if u.Suffix > 0 {
			member += "." + strconv.FormatInt(u.Suffix, 10)
		}
		e.rep.Add(regions.Entry{Key: strings.Clone(u.Key), Member: strings.Clone(member), Remove: true})
	}
}
