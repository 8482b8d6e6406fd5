// Package reach tells whether a Redis server accepts connections, without
// going through a go-redis connection pool.
//
// go-redis's pool stops dialing after PoolSize failed dials in a row and
// then dials only once a second, in the background (its dial circuit
// breaker). Work that repeats while a server is down (the engine's probes,
// the rule overrides' version checks) dials here first and uses the pool
// only once the server accepts connections again, so that the pool never
// counts their failures and serves a restarted server at once. A refused
// dial here is not logged by go-redis either.
package reach

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dial dials the server of c with c's own Dialer, waiting at most timeout,
// and closes the connection: nil means the server accepts connections. For
// clients other than *redis.Client (a cluster or a Ring, whose servers
// change) it returns nil without dialing: ask them.
func Dial(c any, timeout time.Duration) error {
	rc, ok := c.(*redis.Client)
	if !ok {
		return nil
	}
	o := rc.Options()
	if o.Dialer == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := o.Dialer(ctx, o.Network, o.Addr)
	if err != nil {
		return err
	}
	return conn.Close()
}
