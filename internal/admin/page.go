package admin

import (
	"bytes"
	"context"
	_ "embed"
	"html/template"
	"net/http"
	"strconv"
	"time"
)

//go:embed page.html
var pageText string

// pageTemplate is the page: server-rendered, styled inline, with forms
// that work without script.
var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"secs": secs,
	"ms":   ms,
}).Parse(pageText))

// view is one period of the page's most-denied tables.
type view struct {
	Name string
	Top  []Denied
}

// pageData is what the page shows.
type pageData struct {
	Now       string
	Views     []view
	Blocks    []Block
	Overrides []Override
	Throttles []Throttle
	Regions   []Region
	Query     string // the subject searched for
	QueryIP   string // or the address
	Usage     []Usage
	Searched  bool
	Errors    []string // parts that could not be read
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	data := pageData{Now: time.Now().UTC().Format(time.DateTime + " UTC"), Query: q.Get("subject"), QueryIP: q.Get("ip")}
	problemOf := func(part string, err error) {
		var bad *BadInputError
		if errorsAs(err, &bad) {
			data.Errors = append(data.Errors, part+": "+bad.Error())
			return
		}
		h.storeFailed("page: "+part, err)
		data.Errors = append(data.Errors, part+": the rate limiter's store did not answer")
	}
	for _, name := range Views {
		d, _ := since(name)
		top, err := h.topOf(ctx, d)
		if err != nil {
			problemOf("most denied in "+name, err)
		}
		data.Views = append(data.Views, view{Name: name, Top: top})
	}
	var err error
	if data.Blocks, err = h.activeBlocks(ctx); err != nil {
		problemOf("blocks", err)
	}
	if data.Overrides, err = h.overrides(ctx); err != nil {
		problemOf("overrides", err)
	}
	data.Throttles = h.throttles()
	data.Regions = h.regions()
	if data.Query != "" || data.QueryIP != "" {
		data.Searched = true
		if data.Query != "" && data.QueryIP != "" {
			data.Errors = append(data.Errors, "search: give a subject or an address, not both")
		} else if data.Usage, err = h.usage(ctx, data.Query, data.QueryIP); err != nil {
			problemOf("search", err)
		}
	}
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, data); err != nil {
		h.log.Error("admin: page template", "error", err)
		problem(w, http.StatusInternalServerError, "the page could not be rendered")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// Nothing external and no script: a policy that says so.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.Write(b.Bytes())
}

// overrides returns the rule overrides in force.
func (h *handler) overrides(ctx context.Context) ([]Override, error) {
	return h.src.Overrides(ctx)
}

// secs writes seconds for a person: 59s, 4m05s, 2h00m.
func secs(s float64) string {
	d := time.Duration(s * float64(time.Second)).Round(time.Second)
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m" + pad(int(d%time.Minute/time.Second)) + "s"
	}
	return strconv.Itoa(int(d/time.Hour)) + "h" + pad(int(d%time.Hour/time.Minute)) + "m"
}

func pad(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}
