package rules

import (
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/slidelimit/slidelimit/internal/muxpattern"
)

// Route is one handler declared by struct tags, ready to be registered on
// an http.ServeMux.
type Route struct {
	// Field is the name of the struct field holding the handler; promoted
	// fields are named by their path, as in Admin.Files.
	Field string
	// Pattern is the value of the route tag, an http.ServeMux pattern.
	Pattern string
	// Group is the parsed limit tag. It is the zero Group for limit:"none",
	// a route without rules, which callers register unlimited.
	Group Group
	// Handler is the field's value.
	Handler http.Handler
}

// Routes reads the handlers declared by the struct tags of v, a struct or a
// pointer to one (see the package documentation, Struct tags). It reports
// every problem at once, each an *Error naming the type and field, joined
// with errors.Join, and returns the routes of the fields without problems
// beside it, which a caller must not register as if nothing were wrong. It
// is safe for concurrent use; the groups returned must not be modified.
func Routes(v any) ([]Route, error) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return nil, &Error{Offset: -1, Reason: "routes needs a struct or a pointer to a struct, got nil"}
	}
	t := rv.Type()
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		if rv.IsNil() {
			return nil, &Error{Type: t.Elem().String(), Offset: -1, Reason: "nil pointer to struct"}
		}
		rv, t = rv.Elem(), t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, &Error{Offset: -1, Reason: "routes needs a struct or a pointer to a struct, got " + t.String()}
	}
	info := typeRoutes(t)
	var (
		routes []Route
		errs   []error
	)
	for _, f := range info {
		errs = append(errs, f.errs...)
		if !f.handler {
			continue
		}
		h, reason := handlerOf(rv, f.index)
		if reason != "" {
			errs = append(errs, &Error{Type: t.String(), Field: f.name, Offset: -1, Reason: reason})
			continue
		}
		if len(f.errs) == 0 {
			routes = append(routes, Route{Field: f.name, Pattern: f.pattern, Group: f.group, Handler: h})
		}
	}
	return routes, errors.Join(errs...)
}

var handlerType = reflect.TypeFor[http.Handler]()

// fieldRoute is what the tags of one field say; it depends only on the
// struct type, so it is computed once.
type fieldRoute struct {
	name    string
	index   []int
	pattern string
	group   Group
	errs    []error
	handler bool // the field is a readable http.Handler, so check its value
}

var routeCache sync.Map // reflect.Type → []fieldRoute

func typeRoutes(t reflect.Type) []fieldRoute {
	if v, ok := routeCache.Load(t); ok {
		return v.([]fieldRoute)
	}
	// Concurrent first calls may both compute; the result is the same and
	// LoadOrStore keeps one.
	v, _ := routeCache.LoadOrStore(t, computeRoutes(t))
	return v.([]fieldRoute)
}

func computeRoutes(t reflect.Type) []fieldRoute {
	var out []fieldRoute
	patterns := map[string]string{} // pattern → field name
	for _, sf := range reflect.VisibleFields(t) {
		route, hasRoute := sf.Tag.Lookup("route")
		limit, hasLimit := sf.Tag.Lookup("limit")
		if !hasRoute && !hasLimit {
			continue
		}
		f := fieldRoute{name: fieldPath(t, sf.Index), index: sf.Index, pattern: route}
		// fail records a problem with the field; off is -1 when it is not
		// located in a tag value.
		fail := func(tag, input string, off int, format string, args ...any) {
			e := invalidErr(input, off, format, args...)
			e.Type, e.Field, e.Tag = t.String(), f.name, tag
			f.errs = append(f.errs, e)
		}
		switch {
		case !hasRoute:
			fail("", "", -1, "limit tag without route tag%s", misspelt(sf.Tag, "route"))
		case !sf.IsExported():
			fail("", "", -1, "route tag on unexported field")
		case !sf.Type.Implements(handlerType):
			fail("", "", -1, "route tag on field of type %s, which does not implement http.Handler", sf.Type)
		default:
			f.handler = true
		}
		var wildcards []string
		validRoute := false
		if hasRoute {
			var off int
			var reason string
			wildcards, off, reason = muxpattern.Parse(route)
			validRoute = reason == ""
			switch {
			case route == "":
				fail("route", "", -1, "empty route tag")
			case reason != "":
				fail("route", route, off, "%s", reason)
			case patterns[route] != "":
				fail("route", route, 0, "pattern also used by field %s", patterns[route])
			default:
				patterns[route] = f.name
			}
		}
		switch {
		case !hasLimit && hasRoute:
			// A route without rules must say so: a misspelt limit key
			// would otherwise register the route unlimited, silently.
			fail("", "", -1, "route tag without limit tag%s; write limit:%q for a route without rules", misspelt(sf.Tag, "limit"), noLimit)
		case strings.TrimSpace(limit) == noLimit:
			// The zero group: registered unlimited, by choice.
		case hasLimit:
			g, pos, err := parse(limit)
			if err != nil {
				err.Type, err.Field, err.Tag = t.String(), f.name, "limit"
				f.errs = append(f.errs, err)
			} else if validRoute {
				for _, e := range paramErrors(g, pos, limit, route, wildcards) {
					e.Type, e.Field, e.Tag = t.String(), f.name, "limit"
					f.errs = append(f.errs, e)
				}
			}
			f.group = g
		}
		out = append(out, f)
	}
	return out
}

// ParseRoute parses the rule group text that limits the route with the
// http.ServeMux pattern, as Routes parses a limit tag: every param(name)
// rule must also name a wildcard of the pattern. It fails with an *Error
// located in text or pattern, several joined with errors.Join. It is safe
// for concurrent use.
func ParseRoute(pattern, text string) (Group, error) {
	g, pos, perr := parse(text)
	if perr != nil {
		return Group{}, perr
	}
	wildcards, off, reason := muxpattern.Parse(pattern)
	if reason != "" {
		return Group{}, invalidErr(pattern, off, "%s", reason)
	}
	var errs []error
	for _, e := range paramErrors(g, pos, text, pattern, wildcards) {
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return Group{}, errors.Join(errs...)
	}
	return g, nil
}

// paramErrors reports param rules whose name is not a wildcard of the
// route, in input order. It is the one check of both Routes and
// ParseRoute.
func paramErrors(g Group, pos map[string]int, input, route string, wildcards []string) []*Error {
	var errs []*Error
	checkList := func(ns string, ls []Rule) {
		for i, l := range ls {
			if l.Kind == Param && !slices.Contains(wildcards, l.Name) {
				off := offset(pos, ns+"["+strconv.Itoa(i)+"].Name")
				errs = append(errs, invalidErr(input, off,
					"param %q is not a wildcard ({%s} or {%s...}) of route pattern %q",
					l.Name, l.Name, l.Name, route))
			}
		}
	}
	checkList("Rules", g.Rules)
	for i, rr := range g.RoleRules {
		checkList("RoleRules["+strconv.Itoa(i)+"].Rules", rr.Rules)
	}
	// RoleRules are printed after rules canonically but may be written
	// first; keep the report in reading order.
	for i := 1; i < len(errs); i++ {
		for j := i; j > 0 && errs[j].Offset < errs[j-1].Offset; j-- {
			errs[j], errs[j-1] = errs[j-1], errs[j]
		}
	}
	return errs
}

// fieldPath names a possibly promoted field by the names along its index
// path.
func fieldPath(t reflect.Type, index []int) string {
	names := make([]string, len(index))
	for i, x := range index {
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		sf := t.Field(x)
		names[i] = sf.Name
		t = sf.Type
	}
	return strings.Join(names, ".")
}

// handlerOf reads the handler at index, or says why there is none. A nil
// embedded pointer on the way, a nil func or pointer, or an interface
// holding one would all panic when served, so they are reported here.
func handlerOf(v reflect.Value, index []int) (http.Handler, string) {
	f, err := v.FieldByIndexErr(index)
	if err != nil {
		return nil, "handler is unreachable through a nil embedded pointer"
	}
	if !f.CanInterface() {
		return nil, "route tag on unexported field"
	}
	if isNil(f) {
		return nil, "handler is nil"
	}
	if f.Kind() == reflect.Interface && isNil(f.Elem()) {
		return nil, "handler is a nil " + f.Elem().Type().String()
	}
	h, ok := f.Interface().(http.Handler)
	if !ok {
		return nil, "handler does not implement http.Handler"
	}
	return h, ""
}

func isNil(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map, reflect.Pointer, reflect.Slice, reflect.UnsafePointer:
		return v.IsNil()
	}
	return false
}

// noLimit is the limit tag of a route without rules.
const noLimit = "none"

// misspelt returns a hint naming the keys of tag that look like a
// misspelling of want ("limt", "Limit", "limits"), or "" when none does.
func misspelt(tag reflect.StructTag, want string) string {
	var near []string
	for _, k := range tagKeys(tag) {
		if k != want && editDistance(strings.ToLower(k), want) <= 2 {
			near = append(near, strconv.Quote(k))
		}
	}
	if len(near) == 0 {
		return ""
	}
	return " (is " + strings.Join(near, " or ") + " a misspelling of " + want + "?)"
}

// tagKeys returns the keys of tag in the conventional format of
// reflect.StructTag (key:"value" pairs separated by spaces), stopping at
// the first part that does not follow it.
func tagKeys(tag reflect.StructTag) []string {
	var keys []string
	s := string(tag)
	for {
		s = strings.TrimLeft(s, " ")
		i := 0
		for i < len(s) && s[i] > ' ' && s[i] != ':' && s[i] != '"' && s[i] != 0x7f {
			i++
		}
		if i == 0 || i+1 >= len(s) || s[i] != ':' || s[i+1] != '"' {
			return keys
		}
		keys = append(keys, s[:i])
		s = s[i+1:]
		// The quoted value, with its escapes.
		i = 1
		for i < len(s) && s[i] != '"' {
			if s[i] == '\\' {
				i++
			}
			i++
		}
		if i >= len(s) {
			return keys
		}
		s = s[i+1:]
	}
}

// editDistance is the Levenshtein distance between two short strings, in
// bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
