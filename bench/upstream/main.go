// Command upstream is the benchmark's backend: it answers every request
// with a small JSON body, as cheaply as net/http allows. It must not do
// anything a real backend would not (no limiting, no delay, no state), so
// that what a benchmark measures is the gateway in front of it.
package main

import (
	"flag"
	"log"
	"net/http"
	"strconv"
	"time"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18081", "listen address")
	flag.Parse()
	body := []byte(`{"id":42,"name":"bench","ok":true}` + "\n")
	length := strconv.Itoa(len(body))
	srv := &http.Server{
		Addr:              *addr,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h["Content-Type"] = []string{"application/json"}
			h["Content-Length"] = []string{length}
			w.Write(body)
		}),
	}
	log.Fatal(srv.ListenAndServe())
}
