// Command flood sends requests from many distinct client IPs through a
// gateway and reports what they cost it: the gateway's resident memory
// and limiter keys, read from its admin /metrics before and after.
//
// Each request carries its own X-Forwarded-For address, so the gateway
// must be started with --trusted-proxies covering this program's address
// (127.0.0.1/32 on loopback); with no app ID, every request is an unknown
// caller, counted per client IP by the rule file's "*" section until
// --max-keys is reached. Requests go over -conns keep-alive connections.
//
// It prints progress on stderr and one markdown table row on stdout (see
// bench/flood/run.sh, which builds and runs it). It must not be pointed at
// a gateway that trusts its forwarded addresses in production: it forges
// client addresses by design.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-gateway/gateway/bench/internal/adminmetrics"
)

func main() {
	target := flag.String("target", "http://127.0.0.1:18291/v1/user/42", "URL every request is sent to")
	admin := flag.String("admin", "http://127.0.0.1:19291", "the gateway's admin base URL")
	n := flag.Int("n", 1_000_000, "requests to send, each from its own client IP")
	conns := flag.Int("conns", 32, "concurrent keep-alive connections")
	first := flag.String("first-ip", "100.64.0.0", "IPv4 address of the first client; the others follow it")
	app := flag.String("app", "", "X-App-Id to send (empty: none, so every request is an unknown caller)")
	label := flag.String("label", "", "first cell of the markdown row")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("flood: ")
	base, err := netip.ParseAddr(*first)
	if err != nil || !base.Is4() {
		log.Fatalf("-first-ip %q: not an IPv4 address", *first)
	}
	if *n <= 0 || *conns <= 0 {
		log.Fatal("-n and -conns must be positive")
	}
	b4 := base.As4()
	start := uint64(b4[0])<<24 | uint64(b4[1])<<16 | uint64(b4[2])<<8 | uint64(b4[3])
	if start+uint64(*n) > 1<<32 {
		log.Fatalf("-n %d addresses from %s overflow IPv4", *n, base)
	}

	client := &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        *conns,
			MaxIdleConnsPerHost: *conns,
			MaxConnsPerHost:     *conns,
			IdleConnTimeout:     time.Minute,
		},
		Timeout: 30 * time.Second,
	}

	before, err := scrape(client, *admin)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("before: %s", before)

	var (
		next     atomic.Int64
		done     atomic.Int64
		mu       sync.Mutex
		statuses = map[string]int{}
		wg       sync.WaitGroup
	)
	t0 := time.Now()
	stop := make(chan struct{})
	peakc := make(chan snapshot)
	go func() { peakc <- progress(client, *admin, &done, *n, stop) }()
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[string]int{}
			for {
				i := next.Add(1) - 1
				if i >= int64(*n) {
					break
				}
				v := uint32(start + uint64(i))
				ip := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
				local[send(client, *target, *app, ip.String())]++
				done.Add(1)
			}
			mu.Lock()
			for k, v := range local {
				statuses[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stop)
	peak := <-peakc
	elapsed := time.Since(t0)
	log.Printf("sent %d in %s (%.0f/s): %s", *n, elapsed.Round(time.Millisecond), float64(*n)/elapsed.Seconds(), formatStatuses(statuses))

	after, err := scrape(client, *admin)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("after: %s", after)
	peak.rss, peak.heapInuse, peak.keys = max(peak.rss, after.rss), max(peak.heapInuse, after.heapInuse), max(peak.keys, after.keys)
	fmt.Printf("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %.0f | %.0f | %.0f |\n",
		*label, *n, elapsed.Round(time.Second), formatStatuses(statuses),
		mib(before.rss), mib(peak.rss), mib(after.rss), mib(peak.heapInuse), mib(after.heapInuse),
		before.keys, peak.keys, after.keys)
	if statuses["error"] > 0 {
		os.Exit(1)
	}
}

// send sends one request from client IP ip and returns its status code,
// or "error".
func send(c *http.Client, target, app, ip string) string {
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		log.Fatal(err)
	}
	req.Header["X-Forwarded-For"] = []string{ip}
	if app != "" {
		req.Header["X-App-Id"] = []string{app}
	}
	resp, err := c.Do(req)
	if err != nil {
		return "error"
	}
	// Read the body to the end so that the connection is reused.
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// progress logs the requests sent and samples the gateway's metrics every
// 10s until stop is closed, and returns the highest RSS and key count
// sampled: idle keys are swept every minute, so the end is not the peak.
func progress(c *http.Client, admin string, done *atomic.Int64, n int, stop <-chan struct{}) (peak snapshot) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return peak
		case <-t.C:
			s, err := scrape(c, admin)
			if err != nil {
				log.Print(err)
				continue
			}
			peak.rss, peak.heapInuse, peak.keys = max(peak.rss, s.rss), max(peak.heapInuse, s.heapInuse), max(peak.keys, s.keys)
			log.Printf("%d/%d: %s", done.Load(), n, s)
		}
	}
}

// snapshot is what flood reads from the gateway's /metrics.
type snapshot struct {
	rss, heapInuse, keys float64
}

func (s snapshot) String() string {
	return fmt.Sprintf("rss %s, heap in use %s, limiter keys %.0f", mib(s.rss), mib(s.heapInuse), s.keys)
}

// scrape reads the snapshot from the admin /metrics.
func scrape(c *http.Client, admin string) (snapshot, error) {
	const rss, heap, keys = "process_resident_memory_bytes", "go_memstats_heap_inuse_bytes", `gateway_limiter_keys{store="memory"}`
	m, err := adminmetrics.Scrape(c, admin, rss, heap, keys)
	return snapshot{rss: m[rss], heapInuse: m[heap], keys: m[keys]}, err
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func formatStatuses(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
