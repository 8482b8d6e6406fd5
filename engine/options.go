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
// use the same WithKeyPrefix and WithHashedSubjects, or they count in different
// keys. An invalid option makes New fail with an error matching ErrInvalid.
// slidelimit.WithEngineOptions passes options to the engine slidelimit.New
// creates.
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

	denied func(Denial) // WithDenialHook

	regions *regionsConfig // WithRegions, or nil
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

// WithKeyPrefix sets the string every Redis key starts with. The default is
// "slidelimit:". The prefix may not contain braces, which would change the
// Redis Cluster hash tag.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) error {
		if strings.ContainsAny(prefix, "{}") {
			return &optionError{Option: "WithKeyPrefix", Reason: "prefix contains a brace"}
		}
		c.prefix = prefix
		return nil
	}
}

// WithNode sets the snowflake node number (0 to 1023) that makes the
// members this process adds to sorted sets unique. The default is a random
// node from crypto/rand.
//
// Two processes with the same node produce the same member only in the same
// millisecond with the same sequence number. It matters only when both land
// in the same key. With n processes on random nodes, some pair shares a node
// with probability about 1-exp(-n(n-1)/2048): 4% for 10 processes, 50% for
// 38. So the script retries a member already present with a suffixed one: a
// shared node costs a retry, never a lost count. Set distinct nodes (from a
// pod ordinal, say) to avoid even that.
func WithNode(node int64) Option {
	return func(c *config) error {
		if node < 0 || node > 1023 {
			return &optionError{Option: "WithNode", Reason: "node outside 0..1023"}
		}
		c.node, c.nodeSet = node, true
		return nil
	}
}

// WithTimeout bounds each Redis call, one batch of concurrent requests. The
// default is 100 ms. When it passes, the request's fail mode decides. A
// miniredis running in this process (see New) gets at least 5 s: it cannot
// be down, only slow. The deadline reaches the socket only when the go-redis
// client has ContextTimeoutEnabled set. Otherwise the client's ReadTimeout
// and WriteTimeout apply, and New logs a warning.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return &optionError{Option: "WithTimeout", Reason: "timeout not positive"}
		}
		c.timeout = d
		return nil
	}
}

// WithFailMode sets the fail mode of requests whose Fail is FailDefault.
// The default is rules.FailLocal.
//
// FailLocal is the default because both alternatives turn a Redis outage
// into another outage. FailOpen removes every limit exactly when the system
// is in trouble, and lets an attacker who can slow Redis switch limiting
// off. FailClosed turns a Redis outage into an outage of every limited
// endpoint. FailLocal keeps enforcing the same windows per process: n
// processes admit at most n times the limit until Redis answers again.
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

// WithHashedSubjects makes the engine store every subject as a keyed hash
// (HMAC-SHA-256 with secret) instead of its percent-encoded bytes. Redis then
// never holds IP addresses, user ids or header values. By default only
// subjects longer than 128 bytes are hashed, with plain SHA-256.
//
// With an empty secret the hash is plain SHA-256. That hides nothing from
// someone able to enumerate the subjects: all IPv4 addresses take seconds.
// Use a secret shared by every process and kept out of Redis.
func WithHashedSubjects(secret []byte) Option {
	return func(c *config) error {
		c.secret = append([]byte(nil), secret...)
		c.hashAll = true
		return nil
	}
}

// WithLogger sets the logger for backend trouble and rollbacks. It logs at
// Warn a server down, its memory policy, evictions and a client that
// ignores context deadlines, and at Info a server answering again. The
// default is slog.Default() as it is when New runs. A logger with a
// slog.DiscardHandler silences the engine. Logging happens off the fast
// path only: an outage logs a line per 10 s, never one per request.
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
// control. In production every process must use Redis time, or clock skew
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

// WithLocalKeys caps the number of keys the engine remembers in memory. The
// default is 100,000. It bounds two stores, each on its own: the in-process
// fallback limiter (rules.FailLocal), and what Redis last said per key
// (cached denials, and where the fallback starts). At the cap, keys whose
// entries have all left their windows go first. Then, if they must,
// arbitrary live keys go, and what was known about them is forgotten.
func WithLocalKeys(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return &optionError{Option: "WithLocalKeys", Reason: "cap below 1"}
		}
		c.localKeys = n
		return nil
	}
}

// WithCachedDenials turns cached denials on or off. They are on by default.
// A request whose key Redis last reported full, unchanged since, is then
// denied in process without a Redis call. Such a decision has Source
// "cache" and never denies a request Redis would admit (see the package
// documentation, Cached denials). Cached denials cost one connection and
// one goroutine per engine, for the subscription that Close stops. A
// client that cannot subscribe (not a *redis.Client, *redis.ClusterClient
// or *redis.Ring) gets none, and New logs it.
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
