// Package adminmetrics reads a gateway's admin /metrics for the bench programs.
//
// It only reads what the gateway exports and must not be imported by the
// gateway itself.
package adminmetrics

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Scrape returns every sample of the Prometheus text exposition at
// admin+"/metrics", by its series as exposed: name{labels}, or the bare
// name of a metric without labels. It fails if any of want is missing.
func Scrape(c *http.Client, admin string, want ...string) (map[string]float64, error) {
	resp, err := c.Get(strings.TrimSuffix(admin, "/") + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scraping metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping metrics: status %d", resp.StatusCode)
	}
	series := map[string]float64{}
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
			return nil, fmt.Errorf("metrics: %q: %w", line, err)
		}
		series[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	for _, s := range want {
		if _, ok := series[s]; !ok {
			return nil, fmt.Errorf("metrics: no %s", s)
		}
	}
	return series, nil
}
