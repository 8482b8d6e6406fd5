package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/async"
	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/denials"
	"github.com/slidelimit/slidelimit/engine/internal/fallback"
	"github.com/slidelimit/slidelimit/engine/internal/health"
	"github.com/slidelimit/slidelimit/engine/internal/inprocess"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/engine/internal/slots"
	"github.com/slidelimit/slidelimit/engine/internal/undo"
	"github.com/slidelimit/slidelimit/internal/keyparts"
	"github.com/slidelimit/slidelimit/internal/regions"
	"github.com/slidelimit/slidelimit/lua"
	"github.com/slidelimit/slidelimit/rules"
)

// multiWindowSrc is the multi-window script's EVAL form, read once: EVAL
// sends this text and EVALSHA the SHA1 script computed from it. Where the
// servers can, decisions call it as a Redis Function (function.go).
var (
	multiWindowSrc = lua.Script("multi_window")
	script         = redis.NewScript(multiWindowSrc)
)

// Batching defaults, measured on two cores (see bench_test.go and
// docs/performance.md): three batches in flight keep Redis busy while the
// next batch is built.
const (
	defaultInflight = 3
	defaultBatch    = 64
)

// An Engine makes rate-limit decisions against Redis. It is safe for
// concurrent use by multiple goroutines; concurrent calls share Redis round
// trips. The zero value is not usable: create Engines with New.
type Engine struct {
	client   Client
	group    grouping
	keyer    *keyer
	newID    func() int64 // snowflake ids; replaced by tests that force collisions
	timeout  time.Duration
	fail     rules.FailMode
	log      *slog.Logger
	clock    func() time.Time
	local    *fallback.Limiter
	known    *denials.Cache // what Redis last said per key
	denials  bool           // cached denials (WithCachedDenials)
	base     time.Time      // origin of mono
	batch    batcher
	undos    undo.Queue         // of failed calls, run before the next script call
	async    async.Queue[*call] // of FinishAsync, sent with the next script call
	shaArg   any                // script.Hash(), boxed once
	srcArg   any                // multiWindowSrc, boxed once
	fnArg    any                // fnName, boxed once
	fn       fnState            // whether decisions go as FCALL (function.go)
	chanName string             // the invalidation channel (see channel)

	// lastAnswer is when the last batch was answered (µs of e.elapsed;
	// 0 before the first, and with WithClock): FinishAsync's queue reads
	// it for the time a finish was queued (see async.Config.Since).
	lastAnswer atomic.Int64

	doms   *health.Monitor   // failure domains: which servers timed out
	bg     health.Background // goroutines stopped by Close (probes, eviction guard)
	closed atomic.Bool

	// Regions (WithRegions; regions.go): the replicator of admissions to
	// the peer regions, nil without regions, and this region's share.
	rep   *regions.Replicator
	share plan.Share

	slots *slots.Holder // slots of in-flight windows held by running requests

	// denied is called with each denial by a window (denial.go): the
	// root package's denial tallies. Set before the engine decides.
	denied func(Denial)

	// The invalidation subscription of cached denials (see cache.go).
	inval     *denials.Listener
	stop      chan struct{}
	closeOnce sync.Once
}

// New returns an Engine deciding with client. The Engine does not own
// client: Close leaves it open. New fails with an error matching
// ErrInvalid when client is nil (a typed nil too) or an option is invalid.
//
// New talks to Redis before it returns:
//   - It reads INFO memory and stats of every server, waiting at most the
//     timeout or a second, whichever is shorter. It logs a server that may
//     evict the engine's keys (see WithRequireNoEviction).
//   - With cached denials on, it waits for its subscription to their
//     invalidations: at most a second, or the timeout if longer, and not
//     at all when Redis refuses connections.
//   - When the client's server listens in this process, it asks INFO
//     server, waiting at most a second, to recognize an embedded miniredis.
//   - With WithRegions, it writes the hash of the region set (SET with
//     GET), waiting at most the timeout or a second, to log processes of
//     the region that disagree.
//
// It sends no other command: the script is loaded by the first call that
// needs it.
func New(client Client, opts ...Option) (*Engine, error) {
	if isNil(client) {
		return nil, &optionError{Option: "client", Reason: "nil client"}
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if !cfg.nodeSet {
		cfg.node = randomNode()
	}
	node, err := snowflake.NewNode(cfg.node)
	if err != nil {
		return nil, &optionError{Option: "WithNode", Reason: err.Error()}
	}
	e := &Engine{
		client:  client,
		group:   groupingOf(client),
		keyer:   newKeyer(&cfg),
		newID:   func() int64 { return node.Generate().Int64() },
		timeout: cfg.timeout,
		fail:    cfg.fail,
		log:     cfg.logger,
		clock:   cfg.clock,
		local:   fallback.New(cfg.localKeys),
		known:   denials.New(cfg.localKeys),
		base:    time.Now(),
		stop:    make(chan struct{}),
		shaArg:  script.Hash(),
		srcArg:  multiWindowSrc,
		fnArg:   fnName,
	}
	e.denied = cfg.denied
	e.chanName = e.channel()
	e.batch = batcher{maxInflight: defaultInflight, maxBatch: defaultBatch}
	e.undos.Init(e.log, warnEvery, e.remove)
	e.initAsync()
	if enabled, known := contextTimeouts(client); known && !enabled {
		e.log.Warn("engine: the go-redis client ignores context deadlines (ContextTimeoutEnabled is false), " +
			"so its ReadTimeout and WriteTimeout bound Redis calls instead of WithTimeout")
	}
	if rc, ok := client.(*redis.Client); ok && inprocess.Miniredis(rc, inprocess.Probe) {
		e.timeout = max(e.timeout, inprocess.MinTimeout)
	}
	e.startRegions(cfg.regions)
	e.doms = e.newHealth()
	e.slots = e.newSlots(cfg.slotLost)
	if err := e.startGuard(&cfg); err != nil {
		e.Close()
		return nil, err
	}
	if cfg.denials {
		if s, ok := client.(denials.Subscriber); ok {
			e.denials = true
			e.listen(s)
		} else {
			e.log.Warn("engine: the client cannot subscribe to invalidations, so cached denials are off")
		}
	}
	return e, nil
}

// Allow decides whether req may proceed and, if so, counts it in every
// window of every check. A request without windows is allowed without
// asking Redis. Allow always returns a usable Decision. A non-nil error
// says what went wrong, and the Decision then depends on it:
//   - ErrBackend (Redis failed): the request's fail mode decides.
//   - ErrInvalid (the engine cannot evaluate req): a denial.
//   - ErrClosed (after Close), or ctx.Err() when ctx is done on entry: the
//     fail mode decides.
//
// The call waits for at most about the engine's timeout (WithTimeout). It
// checks ctx only on entry, because the Redis round trip is shared with
// concurrent calls.
func (e *Engine) Allow(ctx context.Context, req Request) (Decision, error) {
	c := getCall()
	defer putCall(c)
	d, err := e.decideWith(ctx, c, &req, opAllow)
	if !d.Allowed {
		// While the call's plan holds the keys: a hashed subject's hash
		// is read from its key, not computed again.
		e.noteDenialOf(&req, &d, &c.plan)
	}
	return d, err
}

// peek reports what Allow would decide for req now, without counting it or
// writing anything. In its Decision, Used does not include req, and Allowed
// says whether req would be admitted. It always asks Redis (it is for
// inspection: it never makes a cached denial). Errors are as for Allow.
func (e *Engine) peek(ctx context.Context, req Request) (Decision, error) {
	return e.decide(ctx, &req, opPeek)
}

func (e *Engine) decide(ctx context.Context, req *Request, mode uint8) (Decision, error) {
	c := getCall()
	defer putCall(c)
	return e.decideWith(ctx, c, req, mode)
}

// decideWith is decide with a call from getCall, which the caller returns.
func (e *Engine) decideWith(ctx context.Context, c *call, req *Request, mode uint8) (Decision, error) {
	if err := buildPlan(&c.plan, e.keyer, req); err != nil {
		return Decision{Source: fromFailClosed.String(), Time: e.now()}, err
	}
	if err := e.shareKeys(c, req); err != nil {
		return Decision{Source: fromFailClosed.String(), Time: e.now()}, err
	}
	if len(c.plan.Keys) == 0 {
		return Decision{Allowed: true, Source: fromRedis.String(), Time: e.now(), Windows: []WindowState{}}, nil
	}
	c.mode = mode
	c.prepare()
	c.id, c.member = 0, c.member[:0] // a pooled call's id is another request's
	if e.closed.Load() {
		return e.fallback(c, req, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return e.fallback(c, req, err)
	}
	if mode == opAllow && e.denials && c.plan.NDistinct == 0 && e.cachedDenial(c) {
		if !e.async.Touches(c) {
			d := c.decision(req, fromCache)
			if c.plan.NUnstable > 0 {
				shareDenied(&c.plan, &d)
			}
			return d, nil
		}
		// A queued finish may free room: Redis decides, after it.
		c.prepare()
	}
	op := "allow"
	if mode == opPeek {
		op = "peek"
	}
	e.setID(c)
	e.route(c)
	if needsDown(c) {
		// A server the call needs did not answer: decide at once, without
		// the network; a background probe finds out when it answers.
		e.noteFailed(c)
		return e.fallback(c, req, &backendError{Op: op, Err: errNotAsked})
	}
	e.join(c)
	if c.err != nil {
		e.noteFailed(c)
		return e.fallback(c, req, &backendError{Op: op, Err: c.err})
	}
	// A distinct request's answer is kept too: its counts seed the
	// fallback (a distinct request makes no cached denial, see above: its
	// windows may be full yet admit the values they hold).
	storeKnown(e.known, c, c.sent, c.recv, c.wall)
	d := c.decision(req, fromRedis)
	if c.plan.Slots > 0 && d.admitted != nil {
		e.hold(d.admitted)
	}
	if c.plan.NUnstable > 0 {
		e.shared(c, &d)
	}
	if c.warn != nil {
		return d, c.warn
	}
	return d, nil
}

// cachedDenial reports whether the known-answer cache denies c (see
// denials.Cache.Deny), which it then fills.
func (e *Engine) cachedDenial(c *call) bool {
	now, elapsed := e.monoElapsed()
	at, ok := e.known.Deny(&c.plan, c.res, c.bleft, now, elapsed)
	if !ok {
		return false
	}
	c.status, c.suffix = codec.StatusDenied, 0
	c.sec, c.usec = at/1e6, at%1e6
	return true
}

// storeKnown keeps in k what Redis answered to c, which must have no error
// (see denials.Cache.Store).
func storeKnown(k *denials.Cache, c *call, sent, recv, wall int64) {
	counted := c.status == codec.StatusAdmitted && c.mode == opAllow
	k.Store(&c.plan, c.res, c.bleft, counted, c.sec*1e6+c.usec, sent, recv, wall)
}

// setID gives an Allow its snowflake id and member, which Redis stores,
// and the local fallback too: a give-back of a local decision finds the entry
// by it.
func (e *Engine) setID(c *call) {
	if c.mode == opAllow && c.id == 0 {
		c.id = e.newID()
		c.member = strconv.AppendInt(c.member[:0], c.id, 10)
	}
}

// run decides a batch, in the buffers of its leader lead (which the
// batch holds, though not necessarily first: queued finishes ride ahead).
// On a single server, a timeout marks it down before the batch's leader
// hands the queue on, and while it is down a batch fails at once: its
// calls queued behind a call that timed out and would otherwise each wait
// for one more timeout. (The cluster path does the same per server, see
// runParts.)
func (e *Engine) run(lead *call, batch []*call) {
	if e.group != groupAll {
		e.runParts(lead, batch)
		return
	}
	d := e.doms.One
	if d.Down.Load() {
		failAll(batch, errNotAsked)
		return
	}
	e.runAll(lead, batch)
	err := batch[0].err
	e.observe(d, answered(err), err)
}

// answered reports whether a call that returned err reached a server that
// answered: no error, an error reply, or a reply the engine cannot read.
func answered(err error) bool {
	if err == nil {
		return true
	}
	return answeredErr(err)
}

// answeredErr is answered for a non-nil error; apart, so that the common
// nil case allocates nothing (errors.As needs its targets on the heap).
func answeredErr(err error) bool {
	var re redis.Error
	var ue *codec.ReplyError
	return errors.Is(err, errCollision) || errors.As(err, &re) || errors.As(err, &ue)
}

// reset forgets every request counted for subject by rule l in scope
// and lifts the subject's block there (Check.Block): it deletes the key and
// its block key, in Redis and in the fallback limiter, and tells every
// engine's cache. When l has an in-flight window, its slots are freed too:
// requests running still hold no slot (their renewals report them lost,
// see WithSlotLost), so up to the limit more may be admitted while they
// run. With hashed, subject is a stored hash (Denials.Hash), and reset
// fails with an error matching ErrInvalid when it is not one.
func (e *Engine) reset(ctx context.Context, scope string, l rules.Rule, subject string, hashed bool) error {
	if hashed && !keyparts.IsStoredHash(subject) {
		return fmt.Errorf("%w: %q is not a stored hash", ErrInvalid, subject)
	}
	keys := []string{string(e.keyer.AppendKeyOf(nil, scope, l.Kind, l.Name, plan.KeyCost(&l), subject, hashed))}
	for _, w := range l.Windows {
		if w.Concurrent {
			keys = append(keys, string(e.keyer.AppendKeyOf(nil, scope, l.Kind, l.Name, "", subject, hashed))+plan.SlotSuffix)
			break
		}
	}
	keys = append(keys, e.keyer.CalResetKeys(scope, &l, subject, hashed)...)
	for _, key := range keys {
		e.local.Forget(key)
	}
	if e.closed.Load() {
		return ErrClosed
	}
	// A queued finish sent after the deletion could write to the keys
	// again (a calendar counter's give-back).
	e.async.Drain(false)
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	// The block key shares the key's hash tag (one slot); the slot key
	// may not: with a grained window the key's hash tag differs.
	// With regions, the key's copies go with it; the reset is this
	// region's: peers keep what they received.
	first := []any{"del", keys[0], plan.BlockKey(keys[0])}
	if len(keys) == 1 {
		if err := e.client.Process(ctx, redis.NewIntCmd(ctx, first...)); err != nil {
			return &backendError{Op: "reset", Err: err}
		}
	} else {
		pipe := e.client.Pipeline()
		pipe.Do(ctx, first...)
		for _, key := range keys[1:] {
			pipe.Del(ctx, key)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return &backendError{Op: "reset", Err: err}
		}
	}
	e.publish(ctx, denials.Reset, keys...)
	return nil
}

// Close makes later calls fail with ErrClosed; Allow then follows the fail
// mode. Calls in flight complete. Close sends the finishes that FinishAsync
// queued and waits for their answers. It stops the engine's goroutines and
// waits for them: the subscription to invalidations, the eviction guard,
// the slot renewals and the probes of servers that are down. The client
// stays open. Close is idempotent and always returns nil.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		e.async.Drain(true)
		close(e.stop)
		if e.inval != nil {
			e.inval.Close()
		}
		e.bg.Stop()
		if e.rep != nil {
			e.rep.Close()
		}
		if done := e.slots.Done(); done != nil {
			<-done
		}
	})
	return nil
}

// now is the local decision time for answers that do not come from Redis.
func (e *Engine) now() time.Time {
	if e.clock != nil {
		return e.clock()
	}
	return time.Now()
}

// mono is the local clock of cached states, in µs: monotonic, or the test
// clock (WithClock), in which the script's time and every deadline are
// then expressed.
func (e *Engine) mono() int64 {
	if e.clock != nil {
		return e.clock().UnixMicro()
	}
	return e.elapsed()
}

// elapsed is the real time since the engine started, in µs (at least 1).
func (e *Engine) elapsed() int64 { return int64(time.Since(e.base)/time.Microsecond) + 1 }

// monoElapsed returns mono and elapsed, read from one clock reading when
// they are the same clock.
func (e *Engine) monoElapsed() (mono, elapsed int64) {
	elapsed = e.elapsed()
	if e.clock != nil {
		return e.clock().UnixMicro(), elapsed
	}
	return elapsed, elapsed
}

// recvWall returns mono and the wall clock in µs since 1970 (e.now), read
// from one clock reading when mono is the real one.
func (e *Engine) recvWall() (mono, wall int64) {
	if e.clock != nil {
		return e.mono(), e.now().UnixMicro()
	}
	n := time.Now()
	return int64(n.Sub(e.base)/time.Microsecond) + 1, n.UnixMicro()
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Client is the part of a go-redis client the engine uses. *redis.Client,
// *redis.ClusterClient, *redis.Ring and every redis.UniversalClient satisfy
// it.
//
// The engine groups keys into script calls by the client's dynamic type:
//   - *redis.Client (a single server, or a Sentinel failover client): one
//     call for every key of a batch of concurrent requests.
//   - *redis.ClusterClient: one call per hash slot.
//   - Any other Client (a Ring, or a wrapper the engine cannot see
//     through): one call per key, correct whatever the sharding.
type Client interface {
	Process(ctx context.Context, cmd redis.Cmder) error
	Pipeline() redis.Pipeliner
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
	_ Client = redis.UniversalClient(nil)
)

// grouping says which keys may share one script call.
type grouping uint8

const (
	groupAll  grouping = iota // one server: any keys together
	groupSlot                 // Redis Cluster: keys of one hash slot
	groupKey                  // unknown sharding: each key alone
)

func groupingOf(c Client) grouping {
	switch c.(type) {
	case *redis.Client:
		return groupAll
	case *redis.ClusterClient:
		return groupSlot
	default:
		return groupKey
	}
}

// isNil reports whether c is nil or a nil pointer in a non-nil interface
// (a typed nil such as (*redis.Client)(nil)), which would otherwise panic
// at its first use.
func isNil(c Client) bool {
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// addrOf returns the address of a single-server client, for log lines.
func addrOf(c Client) string {
	if c, ok := c.(*redis.Client); ok {
		return c.Options().Addr
	}
	return ""
}

// contextTimeouts reports whether the client applies context deadlines to
// its sockets, when the engine can tell.
func contextTimeouts(c Client) (enabled, known bool) {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled, true
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled, true
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled, true
	}
	return false, false
}
