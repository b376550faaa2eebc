package replay

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Limits of the HTML report.
const (
	reportCallers   = 100
	reportCharts    = 60  // charts beyond the "all requests" one
	reportPoints    = 480 // most points per series
	chartWidth      = 960
	chartHeight     = 240
	chartLeft       = 64
	chartRight      = 16
	chartTop        = 24
	chartBottom     = 30
	chartPlotWidth  = chartWidth - chartLeft - chartRight
	chartPlotHeight = chartHeight - chartTop - chartBottom
)

//go:embed report.html.tmpl
var reportTemplateText string

var reportTemplate = template.Must(template.New("report").Parse(reportTemplateText))

// WriteReport writes the replay as a self-contained HTML page: no script
// and no external asset. Per app and rule (and for all requests) it draws
// a chart of admitted and limited requests per second under the candidate
// and the baseline, and it lists the summary table and the callers whose
// fate changes. Each series is an SVG path of class "series" with a
// data-series attribute naming it, and each chart a figure of class
// "chart" with data-app and data-rule.
func (r *Result) WriteReport(w io.Writer) error {
	return reportTemplate.Execute(w, r.reportView())
}

// The names of the series, as data-series values.
const (
	seriesCandidateAdmitted = "candidate-admitted"
	seriesCandidateLimited  = "candidate-limited"
	seriesBaselineAdmitted  = "baseline-admitted"
	seriesBaselineLimited   = "baseline-limited"
)

type reportView struct {
	Title       string
	Candidate   string
	Baseline    string
	HasBaseline bool
	Files       string
	Span        string
	Elapsed     string
	Cards       []cardView
	Notes       []string
	Malformed   []LineProblem
	MoreMalf    string
	Late        []LineProblem
	MoreLate    string
	Shadow      bool
	Rows        []rowView
	Total       rowView
	CallerLists []callerListView
	Charts      []chartView
	MoreCharts  int
}

type cardView struct {
	Label, Value, Detail, Class string
}

type rowView struct {
	App, Rule, Anchor                   string
	Requests, Admitted, Limited, Pct    string
	BaseLimited, BasePct, Change, Class string
	Shadow                              string
}

type callerListView struct {
	Title, Note string
	Callers     []callerView
	More        string
}

type callerView struct {
	Name, Kind, Requests, BaseLimited, Limited, Pct, Change, Class string
}

type chartView struct {
	ID, Title, App, Rule, Headline, Class string
	Step                                  string
	Width, Height                         int
	PlotLeft, PlotRight, PlotTop, PlotBot int
	TickBot                               int // where x tick marks end
	YTicks, XTicks                        []tickView
	Series                                []seriesView
}

type tickView struct {
	Pos   float64
	Label string
}

type seriesView struct {
	Key, Label, Class, D, Total string
}

func (r *Result) reportView() *reportView {
	v := &reportView{
		Candidate:   ruleSetText(r.Candidate),
		HasBaseline: r.Baseline != nil,
		Files:       strings.Join(r.Files, ", "),
		Elapsed:     r.Elapsed.Round(time.Millisecond).String(),
		Shadow:      r.Total.Candidate.ShadowLimited > 0,
	}
	v.Title = "Replay of " + r.Candidate.Source.Path
	if r.Baseline != nil {
		v.Baseline = ruleSetText(r.Baseline)
		v.Title = "Replay: " + r.Candidate.Source.Path + " vs " + r.Baseline.Source.Path
	}
	if r.Requests > 0 {
		v.Span = spanText(r.First, r.Last)
	}

	tc := r.Total.Candidate
	v.Cards = append(v.Cards, cardView{Label: "Requests replayed", Value: commas(r.Requests)})
	if r.Baseline != nil {
		tb := r.Total.Baseline
		v.Cards = append(v.Cards,
			cardView{Label: "Limited by the baseline", Value: commas(tb.Limited), Detail: percent(tb.Limited, tb.Requests) + " of requests"},
			cardView{Label: "Limited by the candidate", Value: commas(tc.Limited), Detail: percent(tc.Limited, tc.Requests) + " of requests",
				Class: changeClass(tc.Limited - tb.Limited)})
		newly := 0
		for _, c := range r.Callers {
			if c.NewlyLimited() {
				newly++
			}
		}
		cls := ""
		if newly > 0 {
			cls = "up"
		}
		v.Cards = append(v.Cards, cardView{Label: "Newly limited callers", Value: commas(int64(newly)), Class: cls})
	} else {
		v.Cards = append(v.Cards,
			cardView{Label: "Admitted", Value: commas(tc.Admitted), Detail: percent(tc.Admitted, tc.Requests)},
			cardView{Label: "Limited", Value: commas(tc.Limited), Detail: percent(tc.Limited, tc.Requests)})
	}

	if r.Invalid > 0 {
		v.Notes = append(v.Notes, plural(r.Invalid, "request was", "requests were")+" logged as invalid or unauthorized (400, 401 or 403 before any limit) and not replayed.")
	}
	if r.Other > 0 {
		v.Notes = append(v.Notes, plural(r.Other, "line of another log was", "lines of other logs were")+" skipped (msg is not \"access\").")
	}
	if r.Malformed > 0 {
		v.Notes = append(v.Notes, plural(r.Malformed, "malformed line was", "malformed lines were")+" skipped:")
		v.Malformed = r.MalformedLines
		if more := r.Malformed - int64(len(r.MalformedLines)); more > 0 {
			v.MoreMalf = "… and " + commas(more) + " more"
		}
	}
	if r.Late > 0 {
		v.Late = r.LateLines
		if more := r.Late - int64(len(r.LateLines)); more > 0 {
			v.MoreLate = "… and " + commas(more) + " more"
		}
	}

	for i, g := range r.Groups {
		row := r.row(g)
		if i < reportCharts {
			row.Anchor = "chart-" + strconv.Itoa(i+1)
		}
		v.Rows = append(v.Rows, row)
	}
	v.Total = r.row(&r.Total)
	v.Total.App, v.Total.Rule = "total", ""

	v.CallerLists = r.callerLists()

	v.Charts = append(v.Charts, r.chart(&r.Total, "chart-all", "All requests"))
	for i, g := range r.Groups {
		if i == reportCharts {
			v.MoreCharts = len(r.Groups) - reportCharts
			break
		}
		v.Charts = append(v.Charts, r.chart(g, "chart-"+strconv.Itoa(i+1), g.App+"  "+RuleLabel(g.Rule)))
	}
	return v
}

func (r *Result) row(g *Group) rowView {
	c, b := g.Candidate, g.Baseline
	row := rowView{
		App: g.App, Rule: RuleLabel(g.Rule),
		Requests: commas(c.Requests), Admitted: commas(c.Admitted), Limited: commas(c.Limited),
		Pct: percent(c.Limited, c.Requests), Shadow: commas(c.ShadowLimited),
	}
	if r.Baseline != nil {
		row.BaseLimited, row.BasePct = commas(b.Limited), percent(b.Limited, b.Requests)
		row.Change, row.Class = signed(g.LimitedChange()), changeClass(g.LimitedChange())
	}
	return row
}

// changeClass is the CSS class of a change in limited requests: more
// limited is "up" (red), fewer is "down" (green).
func changeClass(d int64) string {
	switch {
	case d > 0:
		return "up"
	case d < 0:
		return "down"
	}
	return ""
}

func (r *Result) callerLists() []callerListView {
	var newly, noLonger, more, fewer, all []*Caller
	for _, c := range r.Callers {
		d := c.Candidate.Limited - c.Baseline.Limited
		switch {
		case r.Baseline == nil:
			all = append(all, c)
		case c.NewlyLimited():
			newly = append(newly, c)
		case c.NoLongerLimited():
			noLonger = append(noLonger, c)
		case d > 0:
			more = append(more, c)
		case d < 0:
			fewer = append(fewer, c)
		}
	}
	list := func(title, note string, cs []*Caller) callerListView {
		l := callerListView{Title: title, Note: note}
		for i, c := range cs {
			if i == reportCallers {
				l.More = "… and " + commas(int64(len(cs)-reportCallers)) + " more"
				break
			}
			kind := "app"
			if c.App == "" {
				kind = "unknown caller (client IP)"
			}
			d := c.Candidate.Limited - c.Baseline.Limited
			l.Callers = append(l.Callers, callerView{
				Name: c.Name(), Kind: kind, Requests: commas(c.Candidate.Requests),
				BaseLimited: commas(c.Baseline.Limited), Limited: commas(c.Candidate.Limited),
				Pct: percent(c.Candidate.Limited, c.Candidate.Requests), Change: signed(d), Class: changeClass(d),
			})
		}
		return l
	}
	if r.Baseline == nil {
		if len(all) == 0 {
			return nil
		}
		return []callerListView{list("Most limited callers", "", all)}
	}
	lists := []callerListView{list("Newly limited callers", "Limited by the candidate, never by the baseline.", newly)}
	for _, x := range []struct {
		title, note string
		cs          []*Caller
	}{
		{"Limited more", "Limited by both, more by the candidate.", more},
		{"No longer limited callers", "Limited by the baseline, never by the candidate.", noLonger},
		{"Limited less", "Limited by both, less by the candidate.", fewer},
	} {
		if len(x.cs) > 0 {
			lists = append(lists, list(x.title, x.note, x.cs))
		}
	}
	return lists
}

// chart draws g's series: admitted and limited requests per second under
// the candidate (and the baseline), averaged over buckets of equal width
// so that a long replay keeps at most reportPoints points.
func (r *Result) chart(g *Group, id, title string) chartView {
	cv := chartView{
		ID: id, Title: title, App: g.App, Rule: g.Rule,
		Width: chartWidth, Height: chartHeight,
		PlotLeft: chartLeft, PlotRight: chartWidth - chartRight, PlotTop: chartTop, PlotBot: chartHeight - chartBottom,
		TickBot: chartHeight - chartBottom + 5,
	}
	c, b := g.Candidate, g.Baseline
	if r.Baseline != nil {
		cv.Headline = "limited " + commas(b.Limited) + " → " + commas(c.Limited) + " (" + percent(c.Limited, c.Requests) + " of " + commas(c.Requests) + ")"
		cv.Class = changeClass(g.LimitedChange())
	} else {
		cv.Headline = commas(c.Limited) + " of " + commas(c.Requests) + " limited (" + percent(c.Limited, c.Requests) + ")"
	}

	n := len(g.Series)
	per := max(1, (n+reportPoints-1)/reportPoints) // buckets per point
	points := (n + per - 1) / per
	secs := (r.Step * time.Duration(per)).Seconds()
	cv.Step = "each point: requests per second, averaged over " + (r.Step * time.Duration(per)).String()
	if per == 1 && r.Step == time.Second {
		cv.Step = "each point: one second"
	}
	type pick func(*Bucket) int64
	vals := func(f pick) []float64 {
		out := make([]float64, points)
		for i := range g.Series {
			out[i/per] += float64(f(&g.Series[i]))
		}
		for i := range out {
			out[i] /= secs
		}
		return out
	}
	type series struct {
		key, label, class string
		total             int64
		v                 []float64
	}
	var ss []series
	if r.Baseline != nil {
		ss = append(ss,
			series{seriesBaselineAdmitted, "Baseline admitted", "s-base-adm", b.Admitted, vals(func(k *Bucket) int64 { return k.BaselineAdmitted })},
			series{seriesBaselineLimited, "Baseline limited", "s-base-lim", b.Limited, vals(func(k *Bucket) int64 { return k.BaselineLimited })})
	}
	ss = append(ss,
		series{seriesCandidateAdmitted, "Candidate admitted", "s-cand-adm", c.Admitted, vals(func(k *Bucket) int64 { return k.CandidateAdmitted })},
		series{seriesCandidateLimited, "Candidate limited", "s-cand-lim", c.Limited, vals(func(k *Bucket) int64 { return k.CandidateLimited })})
	if r.Baseline == nil {
		ss[0].label, ss[1].label = "Admitted", "Limited"
	}

	top := 0.0
	for _, s := range ss {
		for _, x := range s.v {
			top = math.Max(top, x)
		}
	}
	top, tickStep := niceScale(top)
	for y := 0.0; y <= top+tickStep/2; y += tickStep {
		cv.YTicks = append(cv.YTicks, tickView{Pos: round1(float64(cv.PlotBot) - y/top*chartPlotHeight), Label: compact(y)})
	}

	span := r.Step * time.Duration(n) // the x axis: Origin to Origin+span
	xOf := func(i int) float64 {
		if points == 1 {
			return float64(chartLeft + i*chartPlotWidth)
		}
		return chartLeft + float64(i)*chartPlotWidth/float64(points-1)
	}
	for _, s := range ss {
		var d strings.Builder
		v := s.v
		if len(v) == 1 {
			v = []float64{v[0], v[0]} // a level line across the plot
		}
		for i, x := range v {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&d, "%s%g %g", cmd, round1(xOf(i)), round1(float64(cv.PlotBot)-x/top*chartPlotHeight))
		}
		cv.Series = append(cv.Series, seriesView{Key: s.key, Label: s.label, Class: s.class, D: d.String(), Total: commas(s.total)})
	}
	cv.XTicks = timeTicks(r.Origin, span, points, per, r.Step)
	return cv
}

// timeTicks places labelled ticks at round times along the x axis, whose
// points are per·step apart from origin.
func timeTicks(origin time.Time, span time.Duration, points, per int, step time.Duration) []tickView {
	if points < 2 || span <= 0 {
		return []tickView{{Pos: chartLeft, Label: origin.UTC().Format("15:04:05")}}
	}
	// The plot runs from the first point's bucket start to the last's.
	width := step * time.Duration(per) * time.Duration(points-1)
	if width <= 0 {
		width = span
	}
	every := time.Second
	for _, d := range []time.Duration{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800} {
		every = d * time.Second
		if width/every <= 8 {
			break
		}
	}
	layout := "15:04"
	switch {
	case every < time.Minute:
		layout = "15:04:05"
	case width > 24*time.Hour:
		layout = "01-02 15:04"
	}
	var ticks []tickView
	first := origin.UTC().Truncate(every)
	if first.Before(origin) {
		first = first.Add(every)
	}
	for t := first; !t.After(origin.Add(width)); t = t.Add(every) {
		x := chartLeft + float64(t.Sub(origin))/float64(width)*chartPlotWidth
		ticks = append(ticks, tickView{Pos: round1(x), Label: t.Format(layout)})
	}
	return ticks
}

// niceScale returns an axis top at or above max and a tick step that
// divides it into at most 5 round parts.
func niceScale(max float64) (top, step float64) {
	if max <= 0 {
		return 1, 0.25
	}
	raw := max / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		step = m * mag
		if step >= raw {
			break
		}
	}
	return math.Ceil(max/step) * step, step
}

// compact formats an axis value: 0, 0.5, 12, 1.5k, 2M.
func compact(x float64) string {
	switch {
	case x >= 1e6:
		return strconv.FormatFloat(x/1e6, 'f', -1, 64) + "M"
	case x >= 1e4:
		return strconv.FormatFloat(x/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(x*1000)/1000, 'f', -1, 64)
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }
