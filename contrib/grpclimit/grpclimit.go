package grpclimit

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
	"github.com/slidelimit/slidelimit/transport"
)

// Interceptors holds the interceptors' configuration: a compiled rule group per
// method. It is immutable after New and safe for concurrent use. A call's
// life is its group's (package transport); Interceptors translates it from
// and to gRPC.
type Interceptors struct {
	t         *transport.Transport
	methods   map[string]*method
	defaults  *method // nil: methods not listed are not limited
	exempt    map[string]bool
	exemptSvc []string
	keys      map[string]keyFunc
	costs     map[string]costFunc
}

// method is the compiled rule group of one method, or of the default.
type method struct {
	name  string // "" for the default
	scope string // the group's scope: statement; "" for the full method name
	group *transport.Group
}

// New returns Interceptors for the methods of methods, a map from full method
// name ("/pkg.Service/Method", as grpc.UnaryServerInfo.FullMethod spells
// it) to the rule text of its group, deciding with d (normally
// *engine.Engine, as engine.New returns). Methods not in
// the map are limited by the WithDefault group, if any, unless WithExempt
// exempts them.
//
// The rule language is the one of package rules, with these differences
// for gRPC: param(name) has no meaning (there is no path; use key(name)
// with WithKeyFunc), header(name) reads the incoming metadata, and the
// items of count: are gRPC status code names (see the package
// documentation). New fails, listing every problem at once, with a
// *middleware.ConfigError for each: a method whose name or text is wrong
// (Kind "rules", Name the method, Err a *rules.Error locating the problem
// in its text, for the text), an invalid option, a key or cost function a
// group names that is not registered, or a d that is nil or cannot finish
// calls (as *engine.Engine can) when a group has a count: statement or an
// in-flight window, or WithSettle is given.
func New(d middleware.Decider, methods map[string]string, opts ...Option) (*Interceptors, error) {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	errs := c.errs
	t, err := transport.New(d, "call", c.mw...)
	if err != nil {
		// Parse the groups all the same, to list every problem at once.
		errs = append(errs, err)
	}
	l := &Interceptors{
		t:       t,
		methods: make(map[string]*method, len(methods)),
		exempt:  make(map[string]bool, len(c.exempt)),
		keys:    c.keys,
		costs:   c.costs,
	}
	if d == nil {
		errs = append(errs, &middleware.ConfigError{Kind: "decider", Reason: "nil decider"})
	}
	for _, e := range c.exempt {
		svc := strings.HasSuffix(e, "/")
		if err := checkMethodName(strings.TrimSuffix(e, "/"), svc); err != nil {
			errs = append(errs, methodError(e, fmt.Errorf("in WithExempt: %w", err)))
			continue
		}
		if svc {
			l.exemptSvc = append(l.exemptSvc, e)
		} else {
			l.exempt[e] = true
		}
	}
	names := make([]string, 0, len(methods))
	for name := range methods {
		names = append(names, name)
	}
	slices.Sort(names) // errors in a stable order
	for _, name := range names {
		if err := checkMethodName(name, false); err != nil {
			errs = append(errs, methodError(name, err))
			continue
		}
		if l.isExempt(name) {
			errs = append(errs, methodError(name, errors.New("both limited and exempt (WithExempt)")))
			continue
		}
		m, err := l.compile(name, methods[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l.methods[name] = m
	}
	if c.hasDefaults {
		m, err := l.compile("", c.defaults)
		if err != nil {
			errs = append(errs, err)
		}
		l.defaults = m
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return l, nil
}

// checkMethodName reports whether name is a full method name,
// "/service/method", or with svc a service, "/service".
func checkMethodName(name string, svc bool) error {
	want := `a full method name such as "/pkg.Service/Method"`
	if svc {
		want = `a service such as "/pkg.Service/"`
	}
	rest, ok := strings.CutPrefix(name, "/")
	if !ok {
		return fmt.Errorf("not %s: no leading slash", want)
	}
	service, meth, found := strings.Cut(rest, "/")
	switch {
	case service == "":
		return fmt.Errorf("not %s: empty service", want)
	case svc && found:
		return fmt.Errorf("not %s: too many slashes", want)
	case svc:
		return nil
	case !found || meth == "":
		return fmt.Errorf("not %s: no method", want)
	case strings.Contains(meth, "/"):
		return fmt.Errorf("not %s: too many slashes", want)
	case strings.ContainsAny(name, " \t\r\n"):
		return fmt.Errorf("not %s: white space", want)
	}
	return nil
}

// compile parses and prepares the rule text of method name ("" for the
// default).
func (l *Interceptors) compile(name, text string) (*method, error) {
	g, err := l.t.Parse(text, l.ruleCheck, countItem)
	if err == nil && g.Distinct != "" {
		err = errDistinct
	}
	if err != nil {
		return nil, methodError(name, err)
	}
	if l.t == nil {
		return nil, nil // the options failed: the text is all New can check
	}
	counted := codeSetOf(g.Count)
	tg, err := l.t.Compile(g, func(code int) bool { return counted.has(codes.Code(code)) })
	if err != nil {
		return nil, methodError(name, err)
	}
	return &method{name: name, scope: g.Scope, group: tg}, nil
}

// methodError is the error of method name ("" for the default rules).
func methodError(name string, err error) error {
	where := "gRPC method " + strconv.Quote(name)
	if name == "" {
		where = "gRPC default rules"
	}
	return &middleware.ConfigError{Kind: "rules", Name: name, Reason: where, Err: err}
}

var errDistinct = errors.New("grpclimit: distinct: is not supported for gRPC: a call has no URL path, and its method is already the scope")

// ruleCheck refuses what gRPC cannot count by: param, and key and cost
// functions not registered. (count: items are gRPC code names: countItem.)
func (l *Interceptors) ruleCheck(lim rules.Rule) error {
	switch {
	case lim.Kind == rules.Param:
		return fmt.Errorf("%s has no meaning for gRPC, whose calls have no path values; use key(name) with WithKeyFunc", lim.ID())
	case lim.Kind == rules.Key && l.keys[lim.Name] == nil:
		return fmt.Errorf("%s has no key function; register one with WithKeyFunc(%q, fn)", lim.ID(), lim.Name)
	case lim.Cost != "" && !isDecimal(lim.Cost) && l.costs[lim.Cost] == nil:
		return fmt.Errorf("%s names cost function %q, which is not registered; register one with WithCostFunc(%q, fn)", lim.ID(), lim.Cost, lim.Cost)
	}
	return nil
}

// isDecimal reports whether s is a constant cost: decimal digits.
func isDecimal(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// isExempt reports whether WithExempt exempts fullMethod.
func (l *Interceptors) isExempt(fullMethod string) bool {
	if l.exempt[fullMethod] {
		return true
	}
	for _, s := range l.exemptSvc {
		if strings.HasPrefix(fullMethod, s) {
			return true
		}
	}
	return false
}

// lookup returns the compiled group that limits fullMethod, or nil.
func (l *Interceptors) lookup(fullMethod string) *method {
	if m, ok := l.methods[fullMethod]; ok {
		return m
	}
	if l.defaults == nil || l.isExempt(fullMethod) {
		return nil
	}
	return l.defaults
}
