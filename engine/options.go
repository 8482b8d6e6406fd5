package engine

import (
	"crypto/rand"
	"encoding/binary"
	"log/slog"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/rules"
)

// An Option configures an Engine in New. Every process sharing a Redis must
// use the same WithPrefix and WithHashSubjects, or they count in different
// keys. slidelimit.New passes the options given to
// slidelimit.WithEngineOptions to the engine it creates.
type Option func(*config) error

type config struct {
	prefix    string
	node      int64
	nodeSet   bool
	timeout   time.Duration
	fail      rules.FailMode
	secret    []byte
	hashAll   bool
	logger    *slog.Logger
	clock     func() time.Time
	localKeys int
	denials   bool

	requireNoEviction bool
	evictionHook      func(EvictionEvent)
	evictionEvery     time.Duration
	evictionEverySet  bool

	lease    time.Duration
	slotLost func(SlotLost)
}

func defaultConfig() config {
	return config{
		prefix:    defaultPrefix,
		timeout:   defaultTimeout,
		fail:      rules.FailLocal,
		logger:    slog.Default(),
		localKeys: defaultLocalKeys,
		denials:   true,
		lease:     defaultLease,
	}
}

// Defaults of the options; each option's documentation states its own.
const (
	defaultPrefix    = "slidelimit:"
	defaultTimeout   = 100 * time.Millisecond
	defaultLocalKeys = 100_000
	defaultLease     = 30 * time.Second
)

// WithPrefix sets the string every Redis key starts with; the default is
// "slidelimit:". The prefix may not contain braces, which would change the
// Redis Cluster hash tag.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if strings.ContainsAny(prefix, "{}") {
			return &optionError{Option: "WithPrefix", Reason: "prefix contains a brace"}
		}
		c.prefix = prefix
		return nil
	}
}

// WithNode sets the snowflake node number (0 to 1023) that makes the
// members this process adds to sorted sets unique. The default is a random
// node from crypto/rand.
//
// Two processes with the same node produce the same member only when they
// admit a request in the same millisecond with the same per-millisecond
// sequence number, and it matters only when both land in the same key. With
// n processes on random nodes, some pair shares a node with probability
// about 1-exp(-n(n-1)/2048): 4% for 10 processes, 50% for 38. That is why
// the script detects a member that is already present and retries with a
// suffixed one, so a shared node costs a retry, never a lost count; set
// distinct nodes (for example from a pod ordinal) to avoid even that.
func WithNode(node int64) Option {
	return func(c *config) error {
		if node < 0 || node > 1023 {
			return &optionError{Option: "WithNode", Reason: "node outside 0..1023"}
		}
		c.node, c.nodeSet = node, true
		return nil
	}
}

// WithTimeout bounds each Redis call (one batch of concurrent requests);
// the default is 100 ms. When it passes, the request's fail mode
// decides. A miniredis running in this process (see New) is given at least
// 5 s: it cannot be down, only slow. The deadline reaches the socket only when the go-redis client
// has ContextTimeoutEnabled set; otherwise the client's own ReadTimeout and
// WriteTimeout apply, and New logs a warning.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return &optionError{Option: "WithTimeout", Reason: "timeout not positive"}
		}
		c.timeout = d
		return nil
	}
}

// WithFailMode sets the fail mode of requests whose Fail is FailDefault;
// the default is rules.FailLocal.
//
// FailLocal is the default because both alternatives turn a Redis outage
// into a different outage: FailOpen removes every limit exactly when the
// system is in trouble (and an attacker who can slow Redis down can switch
// limiting off), FailClosed turns a Redis outage into a full outage of
// every limited endpoint. FailLocal keeps enforcing the same windows per
// process, so n processes admit at most n times the limit until Redis
// answers again.
func WithFailMode(m rules.FailMode) Option {
	return func(c *config) error {
		switch m {
		case rules.FailOpen, rules.FailClosed, rules.FailLocal:
			c.fail = m
			return nil
		}
		return &optionError{Option: "WithFailMode", Reason: "unknown fail mode " + string(m)}
	}
}

// WithHashSubjects makes the engine store every subject as a keyed hash
// (HMAC-SHA-256 with secret) instead of its percent-encoded bytes, so that
// Redis never holds IP addresses, user ids or header values. By default
// only subjects longer than 128 bytes are hashed (with plain SHA-256).
//
// With an empty secret the hash is plain SHA-256, which hides nothing from
// someone able to enumerate the subjects (all IPv4 addresses take seconds);
// use a secret shared by every process and kept out of Redis.
func WithHashSubjects(secret []byte) Option {
	return func(c *config) error {
		c.secret = append([]byte(nil), secret...)
		c.hashAll = true
		return nil
	}
}

// WithLogger sets the logger for backend trouble (Warn: a server down, its
// memory policy, evictions, a client that ignores context deadlines;
// Info: a server answering again) and rollbacks. The default is
// slog.Default() as it is when New runs; pass a logger with a
// slog.DiscardHandler to silence the engine. Logging happens off the fast
// path only, and an outage logs a line per 10 s, never one per request.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return &optionError{Option: "WithLogger", Reason: "nil logger"}
		}
		c.logger = l
		return nil
	}
}

// WithClock makes the engine take the decision time from clock instead of
// the Redis server's TIME. It is meant for tests, which need time under
// control: in production every process must use Redis time, or clock skew
// between processes makes the windows inexact. Key expiry still follows the
// server's clock. The clock must return times between 2000 and 2250.
func WithClock(clock func() time.Time) Option {
	return func(c *config) error {
		if clock == nil {
			return &optionError{Option: "WithClock", Reason: "nil clock"}
		}
		c.clock = clock
		return nil
	}
}

// WithLocalKeys caps the number of keys the engine remembers in memory;
// the default is 100,000. It bounds, each on its own, the
// in-process fallback limiter (rules.FailLocal) and the cache of what
// Redis last said per key (cached denials, and the state the fallback
// starts from). When a cap is reached, keys whose entries have all left
// their windows go first, then, if they must, arbitrary live keys, which
// forgets what was known about them.
func WithLocalKeys(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return &optionError{Option: "WithLocalKeys", Reason: "cap below 1"}
		}
		c.localKeys = n
		return nil
	}
}

// WithCachedDenials turns cached denials on or off; they are on by
// default. With them on, a request whose keys Redis last reported full,
// unchanged since, is denied in-process without a Redis call; such a
// decision has Source "cache" and is never wrong in the admitting
// direction (see the package documentation, Cached denials).
func WithCachedDenials(on bool) Option {
	return func(c *config) error {
		c.denials = on
		return nil
	}
}

// randomNode returns a snowflake node from crypto/rand.
func randomNode() int64 {
	var b [2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return int64(binary.LittleEndian.Uint16(b[:]) & 1023)
}
