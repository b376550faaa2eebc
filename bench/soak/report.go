package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// results is everything the report says.
type results struct {
	opts        options
	stamp       string
	started     time.Time
	elapsed     time.Duration
	interrupted bool
	tally       *tally
	reloads     *reloadStats

	initial, start, end metrics // before traffic, after the warm-up, at the end
	startG, endG        goroutines
	samples             []sample

	gatewayLog string
	logLevels  map[string]int
	logErrors  map[string]int // ERROR lines by message, the expected ones excluded
	logWarns   map[string]int
	rejected   int // ERROR lines of rejected edits
	shutdown   string

	failures []string
}

type sample struct {
	at  time.Duration
	m   metrics
	rps float64
}

// rejectedEdit is the gateway's log message for a rule file it refused.
const rejectedEdit = "rule reload failed; keeping the rules in force"

func (r *results) fail(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (m metrics) summary() string {
	return fmt.Sprintf("RSS %s, %.0f goroutines, %.0f limiter keys", mib(m.get(mRSS)), m.get(mGoroutines), m.get(mKeys))
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// readLog counts the gateway's log lines by level, and its errors and
// warnings by message.
func (r *results) readLog() error {
	r.logLevels, r.logErrors, r.logWarns = map[string]int{}, map[string]int{}, map[string]int{}
	f, err := os.Open(r.gatewayLog)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct{ Level, Msg string }
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Level == "" {
			// Not the gateway's slog: net/http's own errors come through
			// its error log as JSON too, so this is something else.
			r.logLevels["other"]++
			r.logErrors[fmt.Sprintf("%.200s", sc.Text())]++
			continue
		}
		r.logLevels[line.Level]++
		switch {
		case line.Level == "ERROR" && line.Msg == rejectedEdit:
			r.rejected++
		case line.Level == "ERROR":
			r.logErrors[line.Msg]++
		case line.Level == "WARN":
			r.logWarns[line.Msg]++
		}
	}
	return sc.Err()
}

// judge records every way the soak failed.
func (r *results) judge() {
	if r.interrupted {
		r.fail("interrupted after %s of %s", r.elapsed.Round(time.Second), r.opts.duration)
	}
	if n := r.unexpected(); n > 0 {
		r.fail("%d responses with an unexpected status", n)
	}
	for _, name := range []string{"limited", "unknown"} {
		c := r.tally.counts[name]
		if c["200"] == 0 || c["429"] == 0 {
			r.fail("the %s class got %d × 200 and %d × 429: it should get both", name, c["200"], c["429"])
		}
	}
	if r.start.series == nil {
		r.fail("no start snapshot: the run ended during the warm-up")
	} else if r.end.series != nil {
		s, e := r.startG.others(), r.endG.others()
		if e-s > r.opts.goroutineSlack {
			r.fail("goroutines other than connections' grew by %d (from %d to %d), more than the slack of %d; grown: %s",
				e-s, s, e, r.opts.goroutineSlack, strings.Join(grown(r.startG, r.endG, 5), "; "))
		}
		// Each upstream connection has two goroutines, and the gateway
		// has at most one per worker; the admin client has one or two.
		if most := 2*r.opts.workers + 4; r.endG.conns > most {
			r.fail("%d goroutines serve connections at the end, more than the %d that %d workers account for",
				r.endG.conns, most, r.opts.workers)
		}
	}
	st := r.reloads
	for _, m := range st.mismatches {
		r.fail("rule write: %s", m)
	}
	if r.end.series != nil {
		invalid := st.invalidTotal()
		if ok := r.end.get(mReloadOK) - r.initial.get(mReloadOK); ok != float64(st.valid) {
			r.fail("gateway_rules_reloads_total{result=\"success\"} grew by %.0f for %d valid writes", ok, st.valid)
		}
		if bad := r.end.get(mReloadFail) - r.initial.get(mReloadFail); bad != float64(invalid) {
			r.fail("gateway_rules_reloads_total{result=\"failure\"} grew by %.0f for %d invalid writes", bad, invalid)
		}
		if r.rejected != invalid {
			r.fail("the gateway logged %d rejected edits for %d invalid writes", r.rejected, invalid)
		}
	}
	for msg, n := range r.logErrors {
		r.fail("the gateway logged %d × error %q", n, msg)
	}
}

func (s *reloadStats) invalidTotal() int {
	n := 0
	for _, v := range s.invalid {
		n += v
	}
	return n
}

func (r *results) unexpected() int {
	n := 0
	for _, v := range r.tally.unexpected {
		n += v
	}
	return n
}

func (r *results) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	o := r.opts
	p("# gateway soak, %s", r.stamp)
	p("")
	total := r.tally.total.Load()
	p("Ran %s (warm-up %s): %d requests, %.0f/s (target %d/s) over %d keep-alive connections;",
		r.elapsed.Round(time.Second), o.warmup, total, float64(total)/r.elapsed.Seconds(), o.rate, o.workers)
	p("the rule file rewritten every %s. Gateway %s (memory store, `--trusted-proxies 127.0.0.1/32 --pprof`,",
		o.reloadEvery, r.initial.buildInfo())
	p("other flags at their defaults) against bench/upstream; %s, %d cores, %s.",
		runtime.Version(), runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH)
	p("")
	if len(r.failures) == 0 {
		p("**Result: pass.**")
	} else {
		p("**Result: FAIL.**")
		p("")
		for _, f := range r.failures {
			p("- %s", f)
		}
	}

	p("")
	p("## Requests")
	p("")
	p("| class | what | expected | requests | by status | unexpected |")
	p("|---|---|---|---:|---|---:|")
	for _, c := range classes {
		counts := r.tally.counts[c.name]
		n := 0
		for _, v := range counts {
			n += v
		}
		exp := make([]string, len(c.expected))
		for i, e := range c.expected {
			exp[i] = strconv.Itoa(e)
		}
		p("| %s | %s | %s | %d | %s | %d |", c.name, c.what, strings.Join(exp, ", "), n, byStatus(counts), r.tally.unexpected[c.name])
	}
	p("| **all** | | | %d | | **%d** |", total, r.unexpected())
	if len(r.tally.examples) > 0 {
		p("")
		p("Unexpected responses (the first %d):", len(r.tally.examples))
		p("")
		for _, e := range r.tally.examples {
			p("- `%s`", strings.ReplaceAll(e, "`", "'"))
		}
	}

	st := r.reloads
	p("")
	p("## Rule reloads")
	p("")
	kinds := make([]string, 0, len(st.invalid))
	for k, v := range st.invalid {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(kinds)
	invalid := strconv.Itoa(st.invalidTotal()) + " invalid"
	if len(kinds) > 0 {
		invalid += " (" + strings.Join(kinds, ", ") + ")"
	}
	p("Writes: %d valid, %s; %d by rename, %d in place.", st.valid, invalid, st.renames, st.inPlace)
	if r.end.series != nil {
		p("`gateway_rules_reloads_total`: success %.0f (the initial load and %.0f reloads), failure %.0f.",
			r.end.get(mReloadOK), r.end.get(mReloadOK)-r.initial.get(mReloadOK), r.end.get(mReloadFail))
	}
	p("Each write checked on `GET /rules` within 5s (valid: its sha256 in force; invalid: rejected, sha256 unchanged): %d mismatches.",
		len(st.mismatches))

	p("")
	p("## Process")
	p("")
	p("Snapshots with no request in flight and the soak's connections closed; `go_goroutines` split by the")
	p("goroutine profile into those of open connections (the upstream transport keeps one idle connection,")
	p("two goroutines, per request it once had in flight) and the others (allowed to grow by %d).", r.opts.goroutineSlack)
	p("")
	p("| | start (after warm-up) | end | change |")
	p("|---|---:|---:|---:|")
	if r.start.series != nil && r.end.series != nil {
		row := func(name, series string, f func(float64) string) {
			s, e := r.start.get(series), r.end.get(series)
			p("| %s | %s | %s | %s |", name, f(s), f(e), signed(f, e-s))
		}
		count := func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
		row("RSS", mRSS, mib)
		row("heap in use", mHeap, mib)
		row("goroutines (`go_goroutines`)", mGoroutines, count)
		p("| — of open connections | %d | %d | %s |", r.startG.conns, r.endG.conns, signed(count, float64(r.endG.conns-r.startG.conns)))
		p("| — others | %d | %d | %s |", r.startG.others(), r.endG.others(), signed(count, float64(r.endG.others()-r.startG.others())))
		row("open fds", mFDs, count)
		row("limiter keys", mKeys, count)
	}
	if len(r.samples) > 0 {
		p("")
		p("| at | requests/s | RSS | heap in use | goroutines | limiter keys |")
		p("|---:|---:|---:|---:|---:|---:|")
		for _, s := range r.samples {
			p("| %s | %.0f | %s | %s | %.0f | %.0f |", s.at.Round(time.Second), s.rps, mib(s.m.get(mRSS)), mib(s.m.get(mHeap)), s.m.get(mGoroutines), s.m.get(mKeys))
		}
	}
	p("")
	levels := make([]string, 0, len(r.logLevels))
	for k, v := range r.logLevels {
		levels = append(levels, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(levels)
	p("Gateway log: %s; %d rejected edits logged. Shutdown: %s.", strings.Join(levels, ", "), r.rejected, r.shutdown)
	for _, m := range sortedKeys(r.logWarns) {
		p("- warning ×%d: %s", r.logWarns[m], m)
	}
	for _, m := range sortedKeys(r.logErrors) {
		p("- error ×%d: %s", r.logErrors[m], m)
	}
	return b.String()
}

func signed(f func(float64) string, d float64) string {
	if d > 0 {
		return "+" + f(d)
	}
	return f(d)
}

func byStatus(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s × %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
