package rules_test

import (
	"fmt"
	"net/http"

	"github.com/slidelimit/slidelimit/rules"
)

func ExampleParse() {
	g, err := rules.Parse("user:10/min,200/d; ip:30/min; global:1000/h")
	if err != nil {
		panic(err)
	}
	for _, l := range g.Rules {
		fmt.Println(l.ID(), l.Windows)
	}
	// Output:
	// user [10/min 200/d]
	// ip [30/min]
	// global [1000/h]
}

func ExampleParse_error() {
	_, err := rules.Parse("ip:5/s,100/fortnight")
	fmt.Println(err)
	_, err = rules.Parse("ip:0/s")
	fmt.Println(err)
	// Output:
	// rules: "ip:5/s,100/fortnight": unknown unit "fortnight" at offset 11
	// rules: "ip:0/s": limit 0 is below 1 at offset 3
}

func ExampleGroup_String() {
	g := rules.MustParse("mode:shadow; role(admin) = ip:30/60s & global:1000/60min; ip:5/1000ms, 100/m; header(x-api-key):1/86400s")
	fmt.Println(g)
	// Output:
	// ip:5/s,100/min; header(X-Api-Key):1/d; role(admin)=ip:30/min & global:1000/h; mode:shadow
}

func ExampleGroup_Validate() {
	g := rules.Group{Rules: []rules.Rule{
		{Kind: rules.IP, Windows: []rules.Window{{Limit: 5, Period: 1e9}, {Limit: 500_000, Period: 60e9}}},
	}}
	fmt.Println(g.Validate())
	// Output:
	// rules: "ip:5/s,500000/min": limit 500000 is above 100000; redis sorted-set memory grows with the limit; a window with a grain, as in 20000/d~15min, may go up to 1125899906842624 at offset 7
}

type Handlers struct {
	Files  http.Handler     `route:"GET /files/{id}" limit:"param(id):10/min; ip:100/min; exempt:admin"`
	Health http.HandlerFunc `route:"GET /healthz" limit:"none"`
}

func ExampleRoutes() {
	h := Handlers{
		Files:  http.FileServer(http.Dir(".")),
		Health: func(w http.ResponseWriter, r *http.Request) {},
	}
	routes, err := rules.Routes(&h)
	if err != nil {
		panic(err)
	}
	for _, r := range routes {
		fmt.Printf("%s %q %q\n", r.Field, r.Pattern, r.Group)
	}
	// Output:
	// Files "GET /files/{id}" "param(id):10/min; ip:100/min; exempt:admin"
	// Health "GET /healthz" ""
}

type BadHandlers struct {
	Files http.Handler `route:"GET /files/{id}" limit:"param(name):1/s"`
	Admin http.Handler `route:"POST /admin" limit:"ip:0/s"`
}

func ExampleRoutes_error() {
	_, err := rules.Routes(BadHandlers{Files: http.NotFoundHandler(), Admin: http.NotFoundHandler()})
	fmt.Println(err)
	// Output:
	// rules: rules_test.BadHandlers.Files: tag limit: "param(name):1/s": param "name" is not a wildcard ({name} or {name...}) of route pattern "GET /files/{id}" at offset 6
	// rules: rules_test.BadHandlers.Admin: tag limit: "ip:0/s": limit 0 is below 1 at offset 3
}
