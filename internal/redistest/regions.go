package redistest

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Regions is a set of regions on one machine: one redis-server each, and
// a delaying Proxy for every ordered pair, through which a region reaches
// another's server. Everything is stopped when the test ends.
type Regions struct {
	// Servers holds each region's own server.
	Servers []*Server

	tb    testing.TB
	links [][]*Proxy // links[from][to], nil on the diagonal
	cut   []bool     // regions partitioned by Cut
}

// StartRegions starts n regions whose links delay each direction by min
// to max, as StartProxy does.
func StartRegions(tb testing.TB, n int, min, max time.Duration) *Regions {
	tb.Helper()
	return StartRegionsWith(tb, n, min, max)
}

// StartRegionsWith is StartRegions with extra command-line arguments for
// every server, as StartWith takes them (for example "--appendonly",
// "yes", so that a server restarted after Kill keeps its data).
func StartRegionsWith(tb testing.TB, n int, min, max time.Duration, extra ...string) *Regions {
	tb.Helper()
	r := &Regions{tb: tb, links: make([][]*Proxy, n), cut: make([]bool, n)}
	for range n {
		r.Servers = append(r.Servers, StartWith(tb, extra...))
	}
	for from := range n {
		r.links[from] = make([]*Proxy, n)
		for to := range n {
			if from != to {
				r.links[from][to] = StartProxy(tb, r.Servers[to].Addr, min, max)
			}
		}
	}
	return r
}

// Link returns the proxy through which region from reaches region to's
// server.
func (r *Regions) Link(from, to int) *Proxy { return r.links[from][to] }

// Local returns a client of region i's own server, without delay, closed
// when the test ends.
func (r *Regions) Local(i int) *redis.Client { return r.Servers[i].Client() }

// Peer returns a client of region to's server as region from reaches it,
// through their link, closed when the test ends.
func (r *Regions) Peer(from, to int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.links[from][to].Addr})
	r.tb.Cleanup(func() { c.Close() })
	return c
}

// Cut partitions region i from every other region, both ways.
func (r *Regions) Cut(i int) {
	r.cut[i] = true
	for j := range r.links {
		if j != i {
			r.links[i][j].Cut()
			r.links[j][i].Cut()
		}
	}
}

// Heal ends region i's partition, both ways, except with regions that
// are cut themselves. Cut and Heal are not safe for concurrent use.
func (r *Regions) Heal(i int) {
	r.cut[i] = false
	for j := range r.links {
		if j != i && !r.cut[j] {
			r.links[i][j].Heal()
			r.links[j][i].Heal()
		}
	}
}

// SetDelay changes the delay of every link, as Proxy.SetDelay does.
func (r *Regions) SetDelay(min, max time.Duration) {
	for from := range r.links {
		for to, p := range r.links[from] {
			if from != to {
				p.SetDelay(min, max)
			}
		}
	}
}
