package engine

import (
	"sort"
	"strconv"
)

// regionsConfig is what WithRegions configured: this region's name and
// its peers' clients.
type regionsConfig struct {
	local string
	peers map[string]Client
}

// WithRegions makes the engine one region of several that keep one limit
// together (docs/regions.md). Each region decides on its own client, as
// without regions; its admissions are then replicated in the background to
// every peer's Redis, and near the limit it admits only its share of the
// headroom its unacknowledged admissions leave. local is this region's name;
// peers maps every other region's name to a client of its Redis (any client
// New takes). Every region must run the same set of names. The engine does
// not own the peers' clients: Close leaves them open.
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
