package replay

import (
	"reflect"

	"github.com/slidelimit/slidelimit/rules"
)

// The fields of the rule model whose meaning the in-process decider
// models (see local). A statement the rule language gains later sets
// another field, which unknownStatements finds: a new field of a window
// (a kind of window) is the engine's business, so such a route goes
// through the engine's script, which knows every window; a new field of a
// group or rule may need a value from each request, which the replay
// does not build, so such a route is refused. Either is better than a
// wrong decision in process.
var (
	knownGroup  = []string{"Rules", "RoleRules", "Exempt", "Count", "Scope", "Mode", "Fail", "Block"}
	knownRule   = []string{"Kind", "Name", "Cost", "Windows"}
	knownWindow = []string{"Limit", "Period", "Grain", "LimitFunc", "Concurrent"}
)

// unknownStatements returns the names of the fields of g and its rules
// (refused), and of their windows (left to the script), that are set and
// not modelled in process.
func unknownStatements(g *rules.Group) (refused, windows []string) {
	refused = unknownFields(reflect.ValueOf(*g), "Group", knownGroup)
	for _, l := range g.Rules {
		refused = append(refused, unknownFields(reflect.ValueOf(l), "Rule", knownRule)...)
		for _, w := range l.Windows {
			windows = append(windows, unknownFields(reflect.ValueOf(w), "Window", knownWindow)...)
		}
	}
	return refused, windows
}

func unknownFields(v reflect.Value, typ string, known []string) []string {
	var out []string
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() || v.Field(i).IsZero() {
			continue
		}
		isKnown := false
		for _, k := range known {
			isKnown = isKnown || k == f.Name
		}
		if !isKnown {
			out = append(out, typ+"."+f.Name)
		}
	}
	return out
}
