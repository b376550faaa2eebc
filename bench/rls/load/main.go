// Command load calls a rate-limit service (envoy.service.ratelimit.v3)
// as fast as it answers, from a few connections, for bench/rls/run.sh:
// the same client for `gateway rls` and envoyproxy/ratelimit. It prints
// one JSON line: calls, OK and OVER_LIMIT answers, errors and seconds.
//
// It measures nothing about the service's CPU; run.sh reads that from
// /proc. It must not speak anything but the public protocol, so that the
// same program measures both services alike.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8081", "the service's gRPC address")
	domain := flag.String("domain", "bench", "domain")
	key := flag.String("key", "hot", "descriptor key")
	values := flag.Int("values", 1, "distinct values drawn at random for the descriptor (1: always \"v\")")
	conns := flag.Int("conns", 4, "gRPC connections")
	workers := flag.Int("workers", 64, "concurrent calls")
	duration := flag.Duration("duration", 10*time.Second, "how long to call")
	flag.Parse()

	clients := make([]rlsv3.RateLimitServiceClient, *conns)
	for i := range clients {
		conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer conn.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	var calls, ok, over, errs atomic.Int64
	var firstErr atomic.Pointer[string]
	// Calls start until stop; those in flight then finish and count, so
	// that none ends in an error of the client's own deadline.
	start := time.Now()
	stop := start.Add(*duration)
	var wg sync.WaitGroup
	for w := range *workers {
		c := clients[w%len(clients)]
		wg.Go(func() {
			for time.Now().Before(stop) {
				v := "v"
				if *values > 1 {
					v = strconv.Itoa(rand.IntN(*values))
				}
				req := &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: []*rlv3.RateLimitDescriptor{{
					Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: *key, Value: v}},
				}}}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := c.ShouldRateLimit(ctx, req)
				cancel()
				switch {
				case err != nil:
					errs.Add(1)
					msg := err.Error()
					firstErr.CompareAndSwap(nil, &msg)
				case resp.OverallCode == rlsv3.RateLimitResponse_OK:
					ok.Add(1)
				default:
					over.Add(1)
				}
				calls.Add(1)
			}
		})
	}
	wg.Wait()
	out := map[string]any{
		"calls": calls.Load(), "ok": ok.Load(), "over": over.Load(), "errors": errs.Load(),
		"seconds": time.Since(start).Seconds(),
	}
	if e := firstErr.Load(); e != nil {
		out["firstError"] = *e
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
