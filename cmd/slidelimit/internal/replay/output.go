package replay

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/internal/ruletime"
)

// jsonReport is the -json shape, exactly
// {"requests": N, "denied": N, "subjects": [...], "policies": [...]}.
type jsonReport struct {
	Requests int64          `json:"requests"`
	Denied   int64          `json:"denied"`
	Subjects []SubjectStats `json:"subjects"`
	Policies []PolicyStats  `json:"policies"`
}

// WriteJSON writes rep as one JSON object.
func (rep *Report) WriteJSON(w io.Writer) error {
	subjects, policies := rep.Subjects, rep.Policies
	if subjects == nil {
		subjects = []SubjectStats{}
	}
	if policies == nil {
		policies = []PolicyStats{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(jsonReport{Requests: rep.Requests, Denied: rep.Denied, Subjects: subjects, Policies: policies})
}

const stamp = "2006-01-02 15:04:05"

// WriteText writes rep for a reader: per policy its requests, denials,
// subjects affected and blocks started, then its top subjects. Text from
// the log or the rules goes through Printable.
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	pct := func(n, of int64) string {
		if of == 0 {
			return "0%"
		}
		return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(of))
	}
	fmt.Fprintf(&b, "%d requests replayed from %s to %s; %d would be denied (%s)\n",
		rep.Requests, rep.First.Format(stamp), rep.Last.Format(stamp), rep.Denied, pct(rep.Denied, rep.Requests))
	affected := 0
	for _, s := range rep.Subjects {
		if s.Denied > 0 {
			affected++
		}
	}
	fmt.Fprintf(&b, "subjects: %d, denied at least once: %d\n", len(rep.Subjects), affected)
	for _, p := range rep.Policies {
		route := p.Route
		if route == "" {
			route = "every request"
		}
		fmt.Fprintf(&b, "\n%s  %s %s: %d requests, %d denied (%s), subjects affected: %d, blocks started: %d\n", Printable(route), Printable(p.Policy), Printable(p.Window),
			p.Requests, p.Denied, pct(p.Denied, p.Requests), p.Subjects, p.Blocks)
		for _, t := range p.Top {
			fmt.Fprintf(&b, "    %-40s %8d denied  first %s  last %s\n", Printable(t.Subject), t.Denied, t.First.Format(stamp), t.Last.Format(stamp))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteSummary writes what a run read and skipped, and its notes: the
// lines for standard error, through Printable.
func (rep *Report) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "replay: %d lines in %s (%.0f lines/s), decided %s\n", rep.Lines, rep.Elapsed.Round(time.Millisecond),
		float64(rep.Lines)/max(rep.Elapsed.Seconds(), 1e-9), Printable(rep.Decider))
	if rep.Unmatched > 0 {
		fmt.Fprintf(w, "replay: %d requests matched no route: not counted\n", rep.Unmatched)
	}
	if rep.Bad > 0 {
		fmt.Fprintf(w, "replay: %d unparseable lines, not replayed; the first (file:line):\n", rep.Bad)
		for _, l := range rep.BadFirst {
			fmt.Fprintf(w, "  %s\n", Printable(l))
		}
	}
	if rep.Late > 0 {
		fmt.Fprintf(w, "replay: %d lines too far out of order, not replayed; the first (file:line):\n", rep.Late)
		for _, l := range rep.LateFirst {
			fmt.Fprintf(w, "  %s\n", Printable(l))
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "replay: note: %s\n", Printable(n))
	}
}

// WriteHTML writes a self-contained page (no external asset): a chart of
// admitted against denied requests per minute, an inline SVG, then the
// policies and the top subjects. Text from the log goes through Printable,
// then HTML escaping.
func (rep *Report) WriteHTML(w io.Writer) error {
	return page.Execute(w, htmlData{Report: rep, Chart: rep.chart(960, 280)})
}

type htmlData struct {
	*Report
	Chart template.HTML
}

// Top is the 20 subjects denied most, for the page.
func (d htmlData) Top() []SubjectStats {
	return d.Subjects[:min(len(d.Subjects), 20)]
}

// chart draws stacked bars per minute: admitted below, denied above.
func (rep *Report) chart(width, height int) template.HTML {
	const left, bottom, top = 60, 40, 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img" aria-label="admitted and denied requests per minute">`, width, height)
	n := len(rep.Minutes)
	layout, per := bucketLabels(rep.Bucket)
	var peak int64 = 1
	for _, m := range rep.Minutes {
		peak = max(peak, m.Admitted+m.Denied)
	}
	plotW, plotH := float64(width-left-10), float64(height-bottom-top)
	y0 := float64(height - bottom)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#444"/>`, left, y0, width-10, y0)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="#444"/>`, left, top, left, y0)
	for i := 0; i <= 4; i++ {
		v := peak * int64(i) / 4
		y := y0 - plotH*float64(v)/float64(peak)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="11" text-anchor="end">%d</text>`, left-6, y+4, v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, left, y, width-10, y)
	}
	if n > 0 {
		bw := plotW / float64(n)
		for i, m := range rep.Minutes {
			x := float64(left) + bw*float64(i)
			ha := plotH * float64(m.Admitted) / float64(peak)
			hd := plotH * float64(m.Denied) / float64(peak)
			title := fmt.Sprintf("%s: %d admitted, %d denied", m.Start.Format(layout), m.Admitted, m.Denied)
			fmt.Fprintf(&b, `<g><title>%s</title><rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="#3a7d44"/>`,
				template.HTMLEscapeString(title), x, y0-ha, max(bw-1, 0.5), ha)
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="#c0392b"/></g>`, x, y0-ha-hd, max(bw-1, 0.5), hd)
		}
		step := max(1, n/8)
		for i := 0; i < n; i += step {
			x := float64(left) + bw*(float64(i)+0.5)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle">%s</text>`, x, y0+16, rep.Minutes[i].Start.Format(layout))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12">requests per %s (UTC)</text>`, left, height-6, per)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="#3a7d44"/><text x="%d" y="%d" font-size="12">admitted</text>`, width-190, height-16, width-176, height-6)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="#c0392b"/><text x="%d" y="%d" font-size="12">denied</text>`, width-100, height-16, width-86, height-6)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from numbers, times and escaped text only
}

// bucketLabels returns how the chart writes the start of a bucket of
// width d, and the caption's unit: a log of up to a week has a bar per
// minute, a longer one coarser bars (see maxBuckets).
func bucketLabels(d time.Duration) (layout, per string) {
	switch {
	case d <= time.Minute:
		return "15:04", "minute"
	case d < 24*time.Hour:
		return "01-02 15:04", ruletime.FormatPeriod(d)
	}
	return "2006-01-02", ruletime.FormatPeriod(d)
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"stamp":     func(t time.Time) string { return t.Format(stamp) },
	"printable": Printable,
	"pct": func(n, of int64) string {
		if of == 0 {
			return "0%"
		}
		return fmt.Sprintf("%.2f%%", 100*float64(n)/float64(of))
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>slidelimit replay</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
td:first-child,th:first-child{text-align:left}h2{margin-top:1.5em}
</style></head><body>
<h1>slidelimit replay</h1>
<p>{{.Requests}} requests from {{stamp .First}} to {{stamp .Last}} UTC; <strong>{{.Denied}} would be denied ({{pct .Denied .Requests}})</strong>. Decided {{.Decider}}.</p>
{{.Chart}}
<h2>Top subjects</h2>
<table><tr><th>subject</th><th>requests</th><th>denied</th></tr>
{{range .Top}}<tr><td>{{printable .Subject}}</td><td>{{.Requests}}</td><td>{{.Denied}}</td></tr>
{{end}}</table>
<h2>Policies</h2>
<table><tr><th>route</th><th>policy</th><th>window</th><th>requests</th><th>denied</th><th>subjects affected</th><th>blocks started</th></tr>
{{range .Policies}}<tr><td>{{printable .Route}}</td><td>{{.Policy}}</td><td>{{.Window}}</td><td>{{.Requests}}</td><td>{{.Denied}}</td><td>{{.Subjects}}</td><td>{{.Blocks}}</td></tr>
{{end}}</table>
{{range .Policies}}{{if .Top}}<h3>{{printable .Route}} {{.Policy}} {{.Window}}: top subjects</h3>
<table><tr><th>subject</th><th>denied</th><th>first denial</th><th>last denial</th></tr>
{{range .Top}}<tr><td>{{printable .Subject}}</td><td>{{.Denied}}</td><td>{{stamp .First}}</td><td>{{stamp .Last}}</td></tr>
{{end}}</table>{{end}}{{end}}
{{if .Notes}}<h2>Notes</h2><ul>{{range .Notes}}<li>{{printable .}}</li>{{end}}</ul>{{end}}
</body></html>
`))
