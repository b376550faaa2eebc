package main

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// metrics is one scrape of the gateway's /metrics: every sample by its
// series as exposed (name{labels}).
type metrics struct {
	at     time.Time
	series map[string]float64
}

// The series the soak reads.
const (
	mRSS        = "process_resident_memory_bytes"
	mGoroutines = "go_goroutines"
	mFDs        = "process_open_fds"
	mHeap       = "go_memstats_heap_inuse_bytes"
	mKeys       = `gateway_limiter_keys{store="memory"}`
	mReloadOK   = `gateway_rules_reloads_total{result="success"}`
	mReloadFail = `gateway_rules_reloads_total{result="failure"}`
)

func (m metrics) get(series string) float64 { return m.series[series] }

// buildInfo returns the labels of gateway_build_info.
func (m metrics) buildInfo() string {
	for s := range m.series {
		if rest, ok := strings.CutPrefix(s, "gateway_build_info{"); ok {
			return strings.TrimSuffix(rest, "}")
		}
	}
	return ""
}

// scrape reads the admin /metrics in the Prometheus text format.
func scrape(c *http.Client, admin string) (metrics, error) {
	m := metrics{at: time.Now(), series: map[string]float64{}}
	resp, err := c.Get(admin + "/metrics")
	if err != nil {
		return m, fmt.Errorf("scraping metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("scraping metrics: status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return m, fmt.Errorf("metrics: %q: %w", line, err)
		}
		m.series[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		return m, fmt.Errorf("reading metrics: %w", err)
	}
	for _, s := range []string{mRSS, mGoroutines, mKeys, mReloadOK, mReloadFail} {
		if _, ok := m.series[s]; !ok {
			return m, fmt.Errorf("metrics: no %s", s)
		}
	}
	return m, nil
}
