package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/ratelimitheader"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/usage"
)

// replayOutcome is what the handler decided for one request.
type replayOutcome struct {
	app, api string
	decision observe.Decision
}

// replayRun is one rule set's handler with its own store and clock, and a
// request, response writer and header it reuses for every line. It is not
// safe for concurrent use.
type replayRun struct {
	h *proxy.Handler
	// rec is the record being decided, which the upstream answers as
	// the live one did; costHeaders are the rules' cost headers, which
	// it sets to the logged cost.
	rec         *replayRecord
	costHeaders []string
	// bodyPaths are where the rules read a cost from the body.
	bodyPaths []usage.Path
	store     *limit.Memory
	nextSweep time.Time // when, in log time, to evict idle keys next
	now       time.Time
	out       replayOutcome
	req       http.Request
	url       url.URL
	hdr       http.Header
	appHdr    string
	appVal    []string
	w         discardWriter
	// claims are the logged claim values of the request being decided,
	// given to the handler as verified ones.
	claims map[string]string
	// keyHdrs are the headers of the last request's keys, removed
	// before the next.
	keyHdrs []string
}

func newReplayRun(rs *ruleset.Set, maxKeys int) (*replayRun, error) {
	store, err := limit.NewMemory(limit.MemoryConfig{MaxKeys: maxKeys})
	if err != nil {
		return nil, fmt.Errorf("replay store: %w", err)
	}
	run := &replayRun{store: store, appHdr: "X-App-Id", appVal: make([]string, 1), hdr: make(http.Header, 1)}
	run.w.h = make(http.Header, 8)
	run.costHeaders = costHeaders(rs.Source)
	run.bodyPaths = bodyPaths(rs.Source)
	run.h, err = proxy.NewHandler(proxy.HandlerConfig{
		Rules:     rs,
		Store:     store,
		Upstream:  http.HandlerFunc(run.answer),
		AppHeader: run.appHdr,
		// No headers: they change nothing that is decided, and cost.
		Headers:   ratelimitheader.None,
		Now:       func() time.Time { return run.now },
		Logger:    slog.New(slog.DiscardHandler),
		Observers: []observe.Observer{run},
		// The log holds only callers the live gateway let through, and
		// the claim values it verified.
		Replay: run,
	})
	if err != nil {
		return nil, err
	}
	run.req.URL = &run.url
	run.req.Header = run.hdr
	run.req.Proto, run.req.ProtoMajor, run.req.ProtoMinor = "HTTP/1.1", 1, 1
	return run, nil
}

// decideAll decides the batch's requests in order into out, evicting
// idle keys every sweepEvery of log time as `gateway serve` does every
// minute, so that MaxKeys bites the same way.
func (run *replayRun) decideAll(batch []replayRecord, out []replayOutcome) {
	for i := range batch {
		rec := &batch[i]
		if run.nextSweep.IsZero() {
			run.nextSweep = rec.t.Add(sweepEvery)
		} else if !rec.t.Before(run.nextSweep) {
			run.store.Sweep(rec.t)
			run.nextSweep = rec.t.Add(sweepEvery)
		}
		out[i] = run.decide(rec)
	}
}

// decide runs rec through the handler at rec's time. The request is built
// as the live gateway saw it after identifying the caller: the logged
// app ID in the app header, and the logged client IP as the peer (with no
// trusted proxies, it is the client IP again).
func (run *replayRun) decide(rec *replayRecord) replayOutcome {
	run.now = rec.t
	run.url.Path, run.url.RawPath = rec.path, ""
	run.req.Method = rec.method
	run.req.RemoteAddr = rec.remote
	if rec.appID != "" {
		run.appVal[0] = rec.appID
		run.hdr[run.appHdr] = run.appVal
	} else {
		delete(run.hdr, run.appHdr)
	}
	for _, name := range run.keyHdrs {
		delete(run.hdr, name)
	}
	run.keyHdrs, run.url.RawQuery = run.keyHdrs[:0], ""
	run.req.Body, run.req.ContentLength = http.NoBody, 0
	clear(run.claims)
	if len(rec.keys) > 0 {
		run.setKeys(rec.keys)
	}
	clear(run.w.h)
	run.out = replayOutcome{}
	run.rec = rec
	run.h.ServeHTTP(&run.w, &run.req)
	run.rec = nil
	return run.out
}

// setKeys puts the logged key values in the request: headers, the query
// string and a JSON body holding the body fields (the log keeps only the
// values keyed limits read).
func (run *replayRun) setKeys(keys []keyValue) {
	var q []string
	var body map[string]any
	for _, kv := range keys {
		if kv.body {
			if body == nil {
				body = map[string]any{}
			}
			setBodyField(body, strings.Split(kv.name, "."), kv.val)
			continue
		}
		if kv.claim {
			if run.claims == nil {
				run.claims = map[string]string{}
			}
			run.claims[kv.name] = kv.val
			continue
		}
		if kv.query {
			q = append(q, url.QueryEscape(kv.name)+"="+url.QueryEscape(kv.val))
			continue
		}
		// A header the app header would hide is not the caller's.
		if kv.name == run.appHdr {
			continue
		}
		run.hdr[kv.name] = []string{kv.val}
		run.keyHdrs = append(run.keyHdrs, kv.name)
	}
	run.url.RawQuery = strings.Join(q, "&")
	if body != nil {
		b, _ := json.Marshal(body) // strings and maps only
		run.req.Body, run.req.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
	}
}

// setBodyField sets the field at path of doc to v, making the objects on
// the way; a field already set to a value other than an object keeps it.
func setBodyField(doc map[string]any, path []string, v string) {
	for _, f := range path[:len(path)-1] {
		next, ok := doc[f].(map[string]any)
		if !ok {
			if _, set := doc[f]; set {
				return
			}
			next = map[string]any{}
			doc[f] = next
		}
		doc = next
	}
	doc[path[len(path)-1]] = v
}

// Claims returns the claim values the live gateway verified and logged
// for the request being decided. It implements proxy.Replay.
func (run *replayRun) Claims(*http.Request) *jwtauth.Claims {
	if len(run.claims) == 0 {
		return nil
	}
	return jwtauth.ClaimsOf(run.claims)
}

// ObserveRequest records the outcome. It implements observe.Observer.
func (run *replayRun) ObserveRequest(o *observe.Outcome) {
	run.out = replayOutcome{app: o.App, api: o.API, decision: o.Decision}
}

// answer is the replay's upstream: it forwards nothing and answers as
// the live upstream did, as far as the log says: the logged status (200
// for a request the live gateway did not forward), and the logged
// upstream cost in every cost header of the rules. So rules that count
// only some statuses or charge a reported cost (docs/rules.md, "Request
// cost") replay what happened live.
func (run *replayRun) answer(w http.ResponseWriter, _ *http.Request) {
	status := http.StatusOK
	if rec := run.rec; rec != nil {
		if rec.status != 0 {
			status = rec.status
		}
		if rec.cost != "" {
			for _, name := range run.costHeaders {
				w.Header()[name] = []string{rec.cost}
			}
			if body := usageBody(run.bodyPaths, rec.cost); run.bodyPaths != nil && body != nil {
				w.Header()["Content-Type"] = []string{"application/json"}
				w.WriteHeader(status)
				w.Write(body)
				return
			}
		}
	}
	w.WriteHeader(status)
}

// costHeaders returns the response headers that rules read a cost from,
// each once.
func costHeaders(src *config.Rules) []string {
	var names []string
	add := func(c config.Cost) {
		if c.Header != "" && !slices.Contains(names, c.Header) {
			names = append(names, c.Header)
		}
	}
	if src == nil {
		return nil
	}
	for _, app := range src.Apps {
		add(app.TotalCost)
		for _, r := range app.Limits {
			add(r.Cost)
		}
	}
	return names
}

// discardWriter is a ResponseWriter that keeps nothing but its header map,
// which the replay clears before each request.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

var (
	_ observe.Observer    = (*replayRun)(nil)
	_ proxy.Replay        = (*replayRun)(nil)
	_ http.ResponseWriter = (*discardWriter)(nil)
)
