package engine

import (
	"unsafe"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
)

// keyer builds the engine's Redis keys.
type keyer struct{ *plan.Keyer }

func newKeyer(c *config) *keyer {
	return &keyer{Keyer: plan.NewKeyer(c.prefix, c.hashAll, c.secret, c.lease)}
}

// buildPlan builds p, the plan of req, with the keys of k.
func buildPlan(p *plan.Plan, k *keyer, req *Request) error {
	// A plan.Check is a Check: the pointer conversion compiles only while
	// their fields are identical.
	checks := unsafe.Slice((*plan.Check)(unsafe.SliceData(req.Checks)), len(req.Checks))
	r := plan.Request{Scope: req.Scope, Checks: checks, Fail: req.Fail, Zone: req.Zone}
	err := p.Build(k.Keyer, &r)
	if pe, ok := err.(*plan.Error); ok {
		return (*requestError)(pe)
	}
	return err
}
