package rules

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

type okHandler struct{ name string }

func (h *okHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(h.name)) }

type goodHandlers struct {
	Files  http.Handler     `route:"GET /files/{id}" limit:"param(id):10/min; ip:100/min"`
	Health http.HandlerFunc `route:"GET /healthz" limit:"none"`
	Blobs  *okHandler       `route:"GET /blobs/{path...}" limit:"role(bot)=param(path):1/s; exempt:admin"`
	Other  string
	notes  string //nolint:unused // an untagged unexported field must be ignored
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	files, blobs := &okHandler{"files"}, &okHandler{"blobs"}
	h := goodHandlers{
		Files:  files,
		Health: func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) },
		Blobs:  blobs,
	}
	for _, v := range []any{h, &h} {
		routes, err := Routes(v)
		if err != nil {
			t.Fatalf("Routes(%T): %v", v, err)
		}
		if len(routes) != 3 {
			t.Fatalf("Routes(%T) returned %d routes, want 3", v, len(routes))
		}
		want := []Route{
			{Field: "Files", Pattern: "GET /files/{id}", Group: MustParse("param(id):10/min; ip:100/min"), Handler: files},
			{Field: "Health", Pattern: "GET /healthz"},
			{Field: "Blobs", Pattern: "GET /blobs/{path...}", Group: MustParse("role(bot)=param(path):1/s; exempt:admin"), Handler: blobs},
		}
		for i, r := range routes {
			if r.Field != want[i].Field || r.Pattern != want[i].Pattern || !reflect.DeepEqual(r.Group, want[i].Group) {
				t.Errorf("route %d = %+v, want %+v", i, r, want[i])
			}
		}
		if routes[0].Handler != files || routes[2].Handler != blobs {
			t.Errorf("handlers not taken from the fields: %v, %v", routes[0].Handler, routes[2].Handler)
		}
		rec := httptest.NewRecorder()
		routes[1].Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		if rec.Body.String() != "ok" {
			t.Errorf("Health handler wrote %q", rec.Body.String())
		}
		if !reflect.DeepEqual(routes[1].Group, Group{}) {
			t.Errorf("route with limit:\"none\" has group %#v, want zero", routes[1].Group)
		}
	}
}

type Inner struct {
	X http.Handler `route:"GET /x" limit:"ip:1/s"`
}

type embedding struct {
	*Inner
	Y http.Handler `route:"GET /y" limit:"none"`
}

func TestRoutesEmbedded(t *testing.T) {
	t.Parallel()
	x, y := &okHandler{"x"}, &okHandler{"y"}
	routes, err := Routes(embedding{Inner: &Inner{X: x}, Y: y})
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 2 || routes[0].Field != "Inner.X" || routes[0].Handler != x || routes[1].Field != "Y" {
		t.Fatalf("Routes = %+v", routes)
	}
	_, err = Routes(embedding{Y: y})
	if want := "rules: rules.embedding.Inner.X: handler is unreachable through a nil embedded pointer"; err == nil || err.Error() != want {
		t.Errorf("nil embedded pointer: got %v, want %s", err, want)
	}
}

type badHandlers struct {
	BadLimit   http.Handler     `route:"GET /a" limit:"ip:0/s"`
	NotHandler string           `route:"GET /b" limit:"none"`
	NilFunc    http.HandlerFunc `route:"GET /c" limit:"none"`
	NilIface   http.Handler     `route:"GET /d" limit:"none"`
	TypedNil   http.Handler     `route:"GET /e" limit:"none"`
	EmptyRoute http.Handler     `route:"" limit:"none"`
	NoRoute    http.Handler     `limit:"ip:1/s"`
	BadParam   http.Handler     `route:"GET /f/{id}/{rest...}" limit:"param(x):1/s; role(a)=param(id):1/s & param(y):2/s"`
	BadPattern http.Handler     `route:"GET /g/{id" limit:"none"`
	DupPattern http.Handler     `route:"GET /a" limit:"none"`
	BadBoth    string           `route:"GET /h" limit:"ip:5/fortnight"`
	unexported http.Handler     `route:"GET /i" limit:"none"`
}

func TestRoutesErrors(t *testing.T) {
	t.Parallel()
	h := &okHandler{"h"}
	v := badHandlers{TypedNil: (*okHandler)(nil), EmptyRoute: h, NoRoute: h, BadParam: h, BadPattern: h, DupPattern: h, unexported: h}
	routes, err := Routes(&v)
	if routes != nil {
		t.Errorf("Routes returned routes with an error: %v", routes)
	}
	want := []string{
		`rules: rules.badHandlers.BadLimit: tag limit: "ip:0/s": limit 0 is below 1 at offset 3`,
		`rules: rules.badHandlers.BadLimit: handler is nil`,
		`rules: rules.badHandlers.NotHandler: route tag on field of type string, which does not implement http.Handler`,
		`rules: rules.badHandlers.NilFunc: handler is nil`,
		`rules: rules.badHandlers.NilIface: handler is nil`,
		`rules: rules.badHandlers.TypedNil: handler is a nil *rules.okHandler`,
		`rules: rules.badHandlers.EmptyRoute: tag route: empty route tag`,
		`rules: rules.badHandlers.NoRoute: limit tag without route tag`,
		`rules: rules.badHandlers.BadParam: tag limit: "param(x):1/s; role(a)=param(id):1/s & param(y):2/s": param "x" is not a wildcard ({x} or {x...}) of route pattern "GET /f/{id}/{rest...}" at offset 6`,
		`rules: rules.badHandlers.BadParam: tag limit: "param(x):1/s; role(a)=param(id):1/s & param(y):2/s": param "y" is not a wildcard ({y} or {y...}) of route pattern "GET /f/{id}/{rest...}" at offset 44`,
		`rules: rules.badHandlers.BadPattern: tag route: "GET /g/{id": bad wildcard segment (must end with '}') at offset 7`,
		`rules: rules.badHandlers.DupPattern: tag route: "GET /a": pattern also used by field BadLimit at offset 0`,
		`rules: rules.badHandlers.BadBoth: route tag on field of type string, which does not implement http.Handler`,
		`rules: rules.badHandlers.BadBoth: tag limit: "ip:5/fortnight": unknown unit "fortnight" at offset 5`,
		`rules: rules.badHandlers.unexported: route tag on unexported field`,
	}
	if err == nil {
		t.Fatal("Routes returned no error")
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("Routes error:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error %T does not unwrap to a list", err)
	}
	for _, e := range joined.Unwrap() {
		var re *Error
		if !errors.As(e, &re) || re.Type != "rules.badHandlers" || re.Field == "" {
			t.Errorf("%v is not an *Error naming type and field", e)
		}
		if kindOf(e) != errInvalid && kindOf(e) != errSyntax {
			t.Errorf("%v has no category", e)
		}
	}
}

func TestRoutesPatterns(t *testing.T) {
	t.Parallel()
	tests := []struct{ pattern, reason string }{
		{"GET /a/{b", `bad wildcard segment (must end with '}') at offset 7`},
		{"GET /a/x{b}", `bad wildcard segment (must start with '{') at offset 7`},
		{"GET files", `host/path missing / at offset 4`},
		{"GET /a/{x}/{x}", `duplicate wildcard name "x" at offset 11`},
		{"GET /a/{}", `empty wildcard at offset 7`},
		{"GET /a/{1x}", `bad wildcard name "1x" at offset 7`},
		{"GET /{a...}/b", `{...} wildcard not at end at offset 5`},
		{"GET /{$}/b", `{$} not at end at offset 5`},
		{"GET /a/../b", `non-CONNECT pattern with unclean path can never match at offset 4`},
		{"GET {h}/a", `host contains '{' (missing initial '/'?) at offset 4`},
		{"G(T /a", `invalid method "G(T" at offset 0`},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			t.Parallel()
			typ := reflect.StructOf([]reflect.StructField{{
				Name: "H", Type: reflect.TypeFor[http.Handler](),
				Tag: reflect.StructTag(`route:"` + tt.pattern + `" limit:"none"`),
			}})
			v := reflect.New(typ)
			v.Elem().Field(0).Set(reflect.ValueOf(http.NotFoundHandler()))
			_, err := Routes(v.Interface())
			want := `rules: ` + typ.String() + `.H: tag route: "` + tt.pattern + `": ` + tt.reason
			if err == nil || err.Error() != want {
				t.Errorf("got %v\nwant %s", err, want)
			}
			// Cross-check against net/http, which panics on a bad pattern.
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("ServeMux accepted %q", tt.pattern)
					}
				}()
				http.NewServeMux().Handle(tt.pattern, http.NotFoundHandler())
			}()
		})
	}
	for _, ok := range []string{"/", "GET /", "example.com/", "GET example.com/a/{b}/{$}", "POST /a/{b}/{c...}", "/{ünïcode}", "CONNECT /a/../b", "GET\t/x"} {
		typ := reflect.StructOf([]reflect.StructField{{
			Name: "H", Type: reflect.TypeFor[http.Handler](),
			Tag: reflect.StructTag(`route:"` + ok + `" limit:"none"`),
		}})
		v := reflect.New(typ)
		v.Elem().Field(0).Set(reflect.ValueOf(http.NotFoundHandler()))
		if _, err := Routes(v.Interface()); err != nil {
			t.Errorf("pattern %q: %v", ok, err)
		}
	}
}

func TestRoutesNotStruct(t *testing.T) {
	t.Parallel()
	var nilHandlers *goodHandlers
	h := &goodHandlers{}
	tests := []struct {
		v    any
		want string
	}{
		{nil, "rules: routes needs a struct or a pointer to a struct, got nil"},
		{nilHandlers, "rules: rules.goodHandlers: nil pointer to struct"},
		{42, "rules: routes needs a struct or a pointer to a struct, got int"},
		{&h, "rules: routes needs a struct or a pointer to a struct, got **rules.goodHandlers"},
		{[]goodHandlers{}, "rules: routes needs a struct or a pointer to a struct, got []rules.goodHandlers"},
		{struct{}{}, ""},
	}
	for _, tt := range tests {
		routes, err := Routes(tt.v)
		if tt.want == "" {
			if err != nil || routes != nil {
				t.Errorf("Routes(%T) = %v, %v; want nil, nil", tt.v, routes, err)
			}
			continue
		}
		if err == nil || err.Error() != tt.want {
			t.Errorf("Routes(%T) error = %v, want %s", tt.v, err, tt.want)
		}
		if kindOf(err) != errInvalid {
			t.Errorf("Routes(%T) error %v is not errInvalid", tt.v, err)
		}
	}
}

// TestRoutesValuesPerCall checks that the cache holds what the type says and
// not the handler values, which may differ between calls.
func TestRoutesValuesPerCall(t *testing.T) {
	t.Parallel()
	type handlers struct {
		A http.Handler `route:"GET /a" limit:"ip:1/s"`
	}
	a1, a2 := &okHandler{"1"}, &okHandler{"2"}
	for _, h := range []http.Handler{a1, a2, nil, a1} {
		routes, err := Routes(handlers{A: h})
		if h == nil {
			if err == nil {
				t.Error("nil handler accepted")
			}
			continue
		}
		if err != nil || routes[0].Handler != h {
			t.Errorf("Routes = %v, %v; want handler %v", routes, err, h)
		}
	}
}

func TestRoutesConcurrent(t *testing.T) {
	t.Parallel()
	type handlers struct {
		A http.Handler `route:"GET /a/{id}" limit:"param(id):1/s; ip:10/min"`
		B http.Handler `route:"GET /b" limit:"none"`
	}
	h := &okHandler{"h"}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 100 {
				routes, err := Routes(&handlers{A: h, B: h})
				if err != nil || len(routes) != 2 {
					t.Errorf("Routes = %v, %v", routes, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestParseRoute checks that ParseRoute makes the checks of a route's limit
// tag, with the same texts as Routes minus the type, field and tag.
func TestParseRoute(t *testing.T) {
	t.Parallel()
	g, err := ParseRoute("GET /f/{id}/{rest...}", "param(id):1/s; role(a)=param(rest):2/s")
	if err != nil || len(g.Rules) != 1 || g.Rules[0].Name != "id" || len(g.RoleRules) != 1 {
		t.Fatalf("ParseRoute of a valid route = %+v, %v", g, err)
	}
	g, err = ParseRoute("GET /f/{id}/{rest...}", "param(x):1/s; role(a)=param(id):1/s & param(y):2/s")
	want := `rules: "param(x):1/s; role(a)=param(id):1/s & param(y):2/s": param "x" is not a wildcard ({x} or {x...}) of route pattern "GET /f/{id}/{rest...}" at offset 6` + "\n" +
		`rules: "param(x):1/s; role(a)=param(id):1/s & param(y):2/s": param "y" is not a wildcard ({y} or {y...}) of route pattern "GET /f/{id}/{rest...}" at offset 44`
	var e *Error
	if err == nil || err.Error() != want || kindOf(err) != errInvalid || !errors.As(err, &e) || !reflect.DeepEqual(g, Group{}) {
		t.Errorf("ParseRoute with unknown params = %+v, %v; want the zero Group and\n%s", g, err, want)
	}
	if _, err := ParseRoute("GET /a/{id}x", "param(id):1/s"); !errors.As(err, &e) || e.Input != "GET /a/{id}x" || e.Offset != 7 || kindOf(err) != errInvalid {
		t.Errorf("ParseRoute with a malformed pattern = %v, want Wildcards' error at offset 7", err)
	}
	if _, err := ParseRoute("GET /a", "ip:5/fortnight"); !errors.As(err, &e) || e.Input != "ip:5/fortnight" || kindOf(err) != errSyntax {
		t.Errorf("ParseRoute with a bad unit = %v, want Parse's errSyntax", err)
	}
}

// TestRoutesPartial checks that Routes returns the routes without problems
// alongside the error, so that callers can check them too and report every
// problem at once.
func TestRoutesPartial(t *testing.T) {
	t.Parallel()
	type handlers struct {
		Bad     http.Handler `route:"GET /a" limit:"ip:0/s"`
		Good    http.Handler `route:"GET /b" limit:"ip:1/s"`
		Nil     http.Handler `route:"GET /c" limit:"none"`
		Again   http.Handler `route:"GET /b" limit:"none"`
		Plain   http.Handler `route:"GET /d" limit:"none"`
		BadPath http.Handler `route:"GET /{" limit:"none"`
	}
	h := &okHandler{"h"}
	routes, err := Routes(handlers{Bad: h, Good: h, Again: h, Plain: h, BadPath: h})
	if kindOf(err) != errInvalid {
		t.Fatalf("Routes error = %v, want errInvalid", err)
	}
	var fields []string
	for _, r := range routes {
		fields = append(fields, r.Field)
	}
	if got := strings.Join(fields, ","); got != "Good,Plain" {
		t.Errorf("routes = %s, want Good,Plain", got)
	}
	for _, f := range []string{"Bad", "Nil", "Again", "BadPath"} {
		if !strings.Contains(err.Error(), ".handlers."+f+":") {
			t.Errorf("error does not name %s:\n%v", f, err)
		}
	}
}

type costTags struct {
	Files http.Handler `route:"GET /files/{id}" limit:"user:10/min; user[bytes]:2Gi/d~1h; param(id)[3]:30/min"`
	Bad   http.Handler `route:"GET /b" limit:"ip[5]:3/min"`
	Grain http.Handler `route:"GET /g" limit:"ip:1/d~7min"`
}

// TestRoutesCostAndGrain checks that limit tags take the same cost and
// grain syntax as Parse, with the same errors.
func TestRoutesCostAndGrain(t *testing.T) {
	t.Parallel()
	h := &okHandler{"h"}
	routes, err := Routes(costTags{Files: h, Bad: h, Grain: h})
	want := []string{
		`rules: rules.costTags.Bad: tag limit: "ip[5]:3/min": cost 5 is above the limit 3 of window 3/min; such a request could never be admitted at offset 6`,
		`rules: rules.costTags.Grain: tag limit: "ip:1/d~7min": grain 7min does not divide the period 1d into whole grains at offset 7`,
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("Routes error\n got %v\nwant %s", err, strings.Join(want, "\n"))
	}
	if len(routes) != 1 || routes[0].Field != "Files" {
		t.Fatalf("routes = %+v", routes)
	}
	g := Group{Rules: []Rule{
		{Kind: User, Windows: []Window{{Limit: 10, Period: time.Minute}}},
		{Kind: User, Cost: "bytes", Windows: []Window{{Limit: 2 << 30, Period: 24 * time.Hour, Grain: time.Hour}}},
		{Kind: Param, Name: "id", Cost: "3", Windows: []Window{{Limit: 30, Period: time.Minute}}},
	}}
	if !reflect.DeepEqual(routes[0].Group, g) {
		t.Errorf("group = %#v, want %#v", routes[0].Group, g)
	}
}

// TestRoutesNoLimit: a route without rules is written limit:"none"; a
// route tag alone, as from a misspelt limit key, registered the route
// unlimited without a word and is now an error naming the field (and the
// key that looks misspelt).
func TestRoutesNoLimit(t *testing.T) {
	t.Parallel()
	type handlers struct {
		Open    http.Handler `route:"GET /open" limit:"none"`
		Spaced  http.Handler `route:"GET /spaced" limit:" none "`
		Typo    http.Handler `route:"GET /typo" limt:"ip:5/s"`
		Upper   http.Handler `route:"GET /upper" Limit:"ip:5/s" json:"-"`
		Bare    http.Handler `route:"GET /bare" json:"bare"`
		NoRoute http.Handler `rout:"GET /x" limit:"ip:5/s"`
		Mixed   http.Handler `route:"GET /mixed" limit:"none; ip:5/s"`
	}
	h := &okHandler{"h"}
	routes, err := Routes(&handlers{Open: h, Spaced: h, Typo: h, Upper: h, Bare: h, NoRoute: h, Mixed: h})
	var fields []string
	for _, r := range routes {
		fields = append(fields, r.Field)
		if !reflect.DeepEqual(r.Group, Group{}) {
			t.Errorf("%s: group %v, want the zero group", r.Field, r.Group)
		}
	}
	if got := strings.Join(fields, ","); got != "Open,Spaced" {
		t.Errorf("routes = %s, want Open,Spaced", got)
	}
	want := []string{
		`rules: rules.handlers.Typo: route tag without limit tag (is "limt" a misspelling of limit?); write limit:"none" for a route without rules`,
		`rules: rules.handlers.Upper: route tag without limit tag (is "Limit" a misspelling of limit?); write limit:"none" for a route without rules`,
		`rules: rules.handlers.Bare: route tag without limit tag; write limit:"none" for a route without rules`,
		`rules: rules.handlers.NoRoute: limit tag without route tag (is "rout" a misspelling of route?)`,
	}
	if err == nil {
		t.Fatal("no error")
	}
	got := strings.Split(err.Error(), "\n")
	if len(got) != len(want)+1 || !reflect.DeepEqual(got[:len(want)], want) {
		t.Errorf("Routes error:\n%s\nwant:\n%s\nand Mixed's parse error", err, strings.Join(want, "\n"))
	}
	if last := got[len(got)-1]; !strings.HasPrefix(last, `rules: rules.handlers.Mixed: tag limit: "none; ip:5/s": `) {
		t.Errorf("limit:\"none; ...\" is not a parse error: %s", last)
	}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var re *Error
		if !errors.As(e, &re) || re.Field == "" || kindOf(e) != errInvalid && kindOf(e) != errSyntax {
			t.Errorf("%v is not an *Error naming the field", e)
		}
	}
}

func TestTagKeys(t *testing.T) {
	t.Parallel()
	for tag, want := range map[reflect.StructTag]string{
		`route:"GET /a" limt:"ip:1/s"`:     "route,limt",
		`a:"x \" y" b:"" c`:                "a,b",
		`  k:"v"   `:                       "k",
		`broken`:                           "",
		`k:"unterminated`:                  "k",
		`route:"GET /a"limit:"ip:1/s"`:     "route,limit",
		"route:\"GET /a\"\tlimit:\"none\"": "route",
	} {
		if got := strings.Join(tagKeys(tag), ","); got != want {
			t.Errorf("tagKeys(%q) = %q, want %q", tag, got, want)
		}
	}
}
