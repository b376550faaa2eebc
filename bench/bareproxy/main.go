// Command bareproxy is the benchmark's baseline: the gateway's own
// httputil.ReverseProxy and Transport (proxy.NewUpstream) with no
// limiting, so that the cost of limiting itself is visible. It must not
// add anything of its own to the request path (no logging, no extra
// handler), or the baseline would no longer be the gateway's.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/url"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/proxy"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18090", "listen address")
	upstream := flag.String("upstream", "http://127.0.0.1:18081", "upstream URL")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	rp, err := proxy.NewUpstream(proxy.UpstreamConfig{URL: u})
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *addr, Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
