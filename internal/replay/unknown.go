package replay

import (
	"reflect"

	"github.com/slidelimit/slidelimit/rules"
)

// The fields of the rule model whose meaning the in-process decider
// models (see local). A statement the rule language gains later sets
// another field: unknownStatements finds it, and such a route is replayed
// through the engine's script, which knows every statement, instead of
// being decided wrongly in process.
var (
	knownGroup   = []string{"Limiters", "Overrides", "Exempt", "Count", "Scope", "Mode", "Fail", "Block"}
	knownLimiter = []string{"Kind", "Name", "Cost", "Windows"}
	knownWindow  = []string{"Limit", "Period", "Grain", "LimitFunc", "Concurrent"}
)

// unknownStatements returns the names of the fields of g, its limiters and
// their windows that are set and not modelled in process.
func unknownStatements(g *rules.Group) []string {
	var out []string
	out = append(out, unknownFields(reflect.ValueOf(*g), "Group", knownGroup)...)
	for _, l := range g.Limiters {
		out = append(out, unknownFields(reflect.ValueOf(l), "Limiter", knownLimiter)...)
		for _, w := range l.Windows {
			out = append(out, unknownFields(reflect.ValueOf(w), "Window", knownWindow)...)
		}
	}
	return out
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
