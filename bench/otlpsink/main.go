// Command otlpsink is the benchmark's trace receiver: an OTLP/HTTP
// endpoint that reads every export and answers it accepted, keeping
// nothing, so that the gateways that trace (bench/run.sh with TRACES=1)
// export as they would to a collector.
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:14318", "listen address")
	flag.Parse()
	srv := &http.Server{
		Addr:              *addr,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			// An empty body is an empty ExportTraceServiceResponse: every
			// span accepted.
			w.Header()["Content-Type"] = []string{"application/x-protobuf"}
			w.WriteHeader(http.StatusOK)
		}),
	}
	log.Fatal(srv.ListenAndServe())
}
