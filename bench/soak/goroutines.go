package main

import (
	"bufio"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// goroutines is the gateway's goroutine profile (its admin
// /debug/pprof/goroutine?debug=1, served with --pprof), split into the
// goroutines of open connections and the others. Connections come and go
// with the load: the upstream transport keeps an idle connection (two
// goroutines) for each request it had in flight at once. The others are
// the ones that must not grow.
type goroutines struct {
	total int
	conns int
	other map[string]int // by stack: function names, innermost first
}

// connFuncs are the functions whose goroutines belong to a connection:
// the proxy's and admin's clients (net/http server) and the upstream's
// (net/http transport).
var connFuncs = []string{"net/http.(*conn).", "net/http.(*connReader).", "net/http.(*persistConn)."}

func goroutineProfile(c *http.Client, admin string) (goroutines, error) {
	g := goroutines{other: map[string]int{}}
	resp, err := c.Get(admin + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return g, fmt.Errorf("goroutine profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return g, fmt.Errorf("goroutine profile: status %d (is --pprof on?)", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	var funcs []string
	flush := func() {
		if n == 0 {
			return
		}
		g.total += n
		stack := strings.Join(funcs, " < ")
		conn := false
		for _, f := range funcs {
			for _, p := range connFuncs {
				conn = conn || strings.HasPrefix(f, p)
			}
		}
		if conn {
			g.conns += n
		} else {
			g.other[stack] += n
		}
		n, funcs = 0, funcs[:0]
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
			// "#\t0x4917f7\tos/signal.signal_recv+0x97\t/usr/.../sigqueue.go:152"
			fields := strings.Fields(line)
			if len(fields) >= 3 {
				name, _, _ := strings.Cut(fields[2], "+")
				funcs = append(funcs, name)
			}
		case strings.Contains(line, " @ "):
			flush()
			v, _, _ := strings.Cut(line, " ")
			if n, err = strconv.Atoi(v); err != nil {
				return g, fmt.Errorf("goroutine profile: %q: %w", line, err)
			}
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		return g, fmt.Errorf("reading the goroutine profile: %w", err)
	}
	return g, nil
}

func (g goroutines) others() int {
	n := 0
	for _, v := range g.other {
		n += v
	}
	return n
}

// grown returns the stacks of which end has more goroutines than start,
// most grown first, at most limit of them.
func grown(start, end goroutines, limit int) []string {
	type growth struct {
		stack string
		by    int
	}
	var gs []growth
	for s, n := range end.other {
		if d := n - start.other[s]; d > 0 {
			gs = append(gs, growth{s, d})
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].by > gs[j].by })
	var out []string
	for i, g := range gs {
		if i == limit {
			break
		}
		out = append(out, fmt.Sprintf("+%d: %.300s", g.by, g.stack))
	}
	return out
}
