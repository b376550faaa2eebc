package replay

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// Limits of the terminal summary; the HTML report shows more.
const (
	summaryCallers  = 20
	summaryProblems = 10
)

// WriteSummary writes the replay's summary for a terminal: what was read,
// the callers newly limited (and no longer limited) by the candidate, and
// the requests by app and rule with their limited counts under both rule
// sets.
func (r *Result) WriteSummary(w io.Writer) error {
	var b strings.Builder
	r.writeInput(&b)
	if r.Requests > 0 {
		r.writeCallers(&b)
		r.writeGroups(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Result) writeInput(b *strings.Builder) {
	rate := ""
	if secs := r.Elapsed.Seconds(); secs > 0 {
		rate = fmt.Sprintf(" (%s lines/s)", commas(int64(float64(r.Lines)/secs)))
	}
	fmt.Fprintf(b, "Replayed %s requests from %s in %s%s\n",
		commas(r.Requests), plural(int64(len(r.Files)), "file", "files"), r.Elapsed.Round(time.Millisecond), rate)
	kv := func(k, v string) { fmt.Fprintf(b, "  %-11s %s\n", k+":", v) }
	logs := strings.Join(r.Files, ", ")
	if len(r.Files) > 1 {
		logs += " (in this order)"
	}
	kv("logs", logs)
	if r.Requests > 0 {
		kv("time", spanText(r.First, r.Last))
	}
	kv("candidate", ruleSetText(r.Candidate))
	if r.Baseline != nil {
		kv("baseline", ruleSetText(r.Baseline))
	}
	var skipped []string
	if r.Invalid > 0 {
		skipped = append(skipped, plural(r.Invalid, "invalid request", "invalid requests")+" (answered 400, 401 or 403 before any limit)")
	}
	if r.Other > 0 {
		skipped = append(skipped, plural(r.Other, "line", "lines")+" of other logs (msg is not \"access\")")
	}
	if len(skipped) > 0 {
		kv("not replayed", strings.Join(skipped, "; "))
	}
	if r.Malformed > 0 {
		kv("malformed", plural(r.Malformed, "line", "lines")+" skipped:")
		writeProblems(b, r.MalformedLines, r.Malformed, summaryProblems)
	}
	if r.Late > 0 {
		kv("late", plural(r.Late, "request was", "requests were")+" logged more than the reorder window after later ones and replayed out of order (raise --reorder-window):")
		writeProblems(b, r.LateLines, r.Late, summaryProblems)
	}
}

func writeProblems(b *strings.Builder, ps []LineProblem, total int64, max int) {
	for i, p := range ps {
		if i == max {
			break
		}
		fmt.Fprintf(b, "    %s\n", p)
	}
	if shown := int64(min(len(ps), max)); total > shown {
		fmt.Fprintf(b, "    … and %s more\n", commas(total-shown))
	}
}

func (r *Result) writeCallers(b *strings.Builder) {
	var newly, more, noLonger, less, rest []*Caller
	for _, c := range r.Callers {
		switch {
		case r.Baseline == nil:
			rest = append(rest, c)
		case c.NewlyLimited():
			newly = append(newly, c)
		case c.NoLongerLimited():
			noLonger = append(noLonger, c)
		case c.Candidate.Limited > c.Baseline.Limited:
			more = append(more, c)
		case c.Candidate.Limited < c.Baseline.Limited:
			less = append(less, c)
		}
	}
	if r.Baseline == nil {
		r.callerTable(b, "Most limited callers", rest)
		return
	}
	if len(newly) == 0 {
		b.WriteString("\nNo caller is newly limited by the candidate.\n")
	} else {
		r.callerTable(b, "Newly limited callers (limited by the candidate, never by the baseline)", newly)
	}
	r.callerTable(b, "Limited more (by both, more by the candidate)", more)
	r.callerTable(b, "No longer limited callers (limited by the baseline, never by the candidate)", noLonger)
	r.callerTable(b, "Limited less (by both, less by the candidate)", less)
}

func (r *Result) callerTable(b *strings.Builder, title string, cs []*Caller) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s:\n", title)
	t := &textTable{right: []bool{false, true, true, false, true, true}}
	if r.Baseline != nil {
		t.add("CALLER", "REQUESTS", "LIMITED: BASELINE", "", "CANDIDATE", "")
	} else {
		t.add("CALLER", "REQUESTS", "LIMITED", "")
		t.right = []bool{false, true, true, true}
	}
	for i, c := range cs {
		if i == summaryCallers {
			break
		}
		cells := []string{callerName(c), commas(c.Candidate.Requests)}
		if r.Baseline != nil {
			cells = append(cells, commas(c.Baseline.Limited), "→")
		}
		t.add(append(cells, commas(c.Candidate.Limited), "("+percent(c.Candidate.Limited, c.Candidate.Requests)+")")...)
	}
	t.write(b, "  ")
	if len(cs) > summaryCallers {
		fmt.Fprintf(b, "  … and %s more\n", commas(int64(len(cs)-summaryCallers)))
	}
}

func callerName(c *Caller) string {
	if c.App == "" {
		return c.Name() + " (unknown caller)"
	}
	return c.Name()
}

func (r *Result) writeGroups(b *strings.Builder) {
	if r.Baseline != nil {
		b.WriteString("\nBy app and rule (the candidate's rules; the baseline decided the same requests):\n")
	} else {
		b.WriteString("\nBy app and rule:\n")
	}
	shadow := r.Total.Candidate.ShadowLimited > 0
	t := &textTable{}
	var head []string
	if r.Baseline != nil {
		head = []string{"APP", "RULE", "REQUESTS", "LIMITED: BASELINE", "", "CANDIDATE", "", "CHANGE"}
		t.right = []bool{false, false, true, true, false, true, true, true}
	} else {
		head = []string{"APP", "RULE", "REQUESTS", "ADMITTED", "LIMITED", ""}
		t.right = []bool{false, false, true, true, true, true}
	}
	if shadow {
		head = append(head, "SHADOW-LIMITED")
		t.right = append(t.right, true)
	}
	t.add(head...)
	row := func(g *Group, app, rule string) {
		c := g.Candidate
		cells := []string{app, rule, commas(c.Requests)}
		pct := "(" + percent(c.Limited, c.Requests) + ")"
		if r.Baseline != nil {
			cells = append(cells, commas(g.Baseline.Limited), "→", commas(c.Limited), pct, signed(g.LimitedChange()))
		} else {
			cells = append(cells, commas(c.Admitted), commas(c.Limited), pct)
		}
		if shadow {
			cells = append(cells, commas(c.ShadowLimited))
		}
		t.add(cells...)
	}
	for _, g := range r.Groups {
		row(g, g.App, RuleLabel(g.Rule))
	}
	row(&r.Total, "total", "")
	t.write(b, "  ")
}

// RuleLabel is how a group's rule is shown: its pattern, or "(no rule)".
func RuleLabel(rule string) string {
	if rule == "" {
		return "(no rule)"
	}
	return rule
}

func signed(n int64) string {
	switch {
	case n > 0:
		return "+" + commas(n)
	case n == 0:
		return "0"
	}
	return "-" + commas(-n)
}

// percent is n/of as a percentage with one decimal; "<0.1%" when it is
// not zero but would round to it.
func percent(n, of int64) string {
	if of == 0 {
		return "0.0%"
	}
	p := float64(n) * 100 / float64(of)
	if n > 0 && p < 0.05 {
		return "<0.1%"
	}
	return strconv.FormatFloat(p, 'f', 1, 64) + "%"
}

// commas formats n with thousands separators: 1,204.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return commas(n) + " " + many
}

// spanText renders the replayed time span in UTC.
func spanText(first, last time.Time) string {
	first, last = first.UTC(), last.UTC()
	end := last.Format("15:04:05.000")
	if first.YearDay() != last.YearDay() || first.Year() != last.Year() {
		end = last.Format("2006-01-02 15:04:05.000")
	}
	return fmt.Sprintf("%s → %s UTC (%s)", first.Format("2006-01-02 15:04:05.000"), end, last.Sub(first).Round(time.Millisecond))
}

func ruleSetText(rs *ruleset.Set) string {
	src := rs.Source
	name := src.Path
	if name == "" {
		name = "(rules)"
	}
	sha := src.SHA256
	if len(sha) > 12 {
		sha = sha[:12] + "…"
	}
	return fmt.Sprintf("%s (sha256 %s)", name, sha)
}

// textTable aligns columns of text: right-aligned where right says so.
type textTable struct {
	rows  [][]string
	right []bool
}

func (t *textTable) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *textTable) write(b *strings.Builder, indent string) {
	var widths []int
	for _, row := range t.rows {
		for i, c := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, row := range t.rows {
		var line strings.Builder
		line.WriteString(indent)
		for i, c := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			padding := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i < len(t.right) && t.right[i] {
				line.WriteString(padding + c)
			} else {
				line.WriteString(c + padding)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
}
