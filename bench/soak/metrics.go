package main

import (
	"net/http"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/bench/internal/adminmetrics"
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

// scrape reads the admin /metrics.
func scrape(c *http.Client, admin string) (metrics, error) {
	series, err := adminmetrics.Scrape(c, admin, mRSS, mGoroutines, mKeys, mReloadOK, mReloadFail)
	return metrics{at: time.Now(), series: series}, err
}
