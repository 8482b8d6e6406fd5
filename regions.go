package slidelimit

import (
	"errors"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// Regions names the regions that keep one limit together: this process's
// region and a client of every other region's Redis (docs/regions.md).
// Every region runs the same names, each with its own as Local.
type Regions struct {
	// Local is this process's region, whose Redis is the client given to
	// New. It must not be empty.
	Local string
	// Peers maps every other region's name to a client of its Redis: a
	// *redis.Client, *redis.ClusterClient or any client New takes. Names
	// must not be empty nor Local; clients must not be nil. The Limiter
	// does not own them: Close leaves them open.
	Peers map[string]engine.Client
}

// WithRegions makes the Limiter one region of several that keep one limit
// together. Each region decides on its own Redis in one call, as without
// regions, and no request waits on another region; admissions, give-backs,
// the blocks of block: statements and resets (Reset) are replicated to the
// peers in the background, and near the limit a region
// admits only its share of the headroom its unacknowledged admissions
// leave, which bounds the overshoot (docs/regions.md). A rule group with
// the statement regions:local is not replicated. Rule overrides
// (SetRules) are not: each region keeps its own. An empty Local, an empty
// peer name, Local among Peers or a nil client make New fail with a
// *ConfigError.
func WithRegions(r Regions) Option {
	return func(c *config) {
		c.engine = append(c.engine, engine.WithRegions(r.Local, r.Peers))
		c.regions = true
	}
}

// errNotShared is why a group that regions cannot share is refused.
var errNotShared = errors.New(prefix + "a cost, a grain, a calendar window or distinct: is not shared across regions; " +
	"add regions:local to keep the group's counts in each region (docs/regions.md)")

// checkShared reports, under regions, a group the share rule does not
// cover yet: one with a cost, a grained or calendar window or distinct:,
// unless it is regions:local.
func checkShared(g *rules.Group) error {
	if g.Regional {
		return nil
	}
	if g.Distinct != "" {
		return errNotShared
	}
	for _, r := range g.Rules {
		if r.Cost != "" {
			return errNotShared
		}
		for _, w := range r.Windows {
			if w.Grain != 0 || w.Calendar != "" {
				return errNotShared
			}
		}
	}
	return nil
}

// RegionStats returns the replication figures of every peer region,
// ordered by name: the age of its oldest unacknowledged admission, its
// queue and whether it answers. It returns nil without WithRegions. It is
// safe for concurrent use.
func (l *Limiter) RegionStats() []engine.RegionStats { return l.engine.RegionStats() }
