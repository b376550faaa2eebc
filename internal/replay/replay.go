package replay

import (
	"bufio"
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/jwtauth"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/ratelimit-gateway/gateway/internal/usage"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// Config configures Replay.
type Config struct {
	// Candidate is the rule set to try. Required.
	Candidate *proxy.RuleSet
	// Baseline is the rule set to compare with (the rules in force), or
	// nil for none.
	Baseline *proxy.RuleSet
	// MaxKeys caps each replay store's keys, as --max-keys does the live
	// gateway's. Default limit.DefaultMaxKeys (1,000,000).
	MaxKeys int
	// ReorderWindow is how far out of time order lines may be and still
	// be replayed in time order. The access log is written as responses
	// complete, so a slow request is logged after faster ones that arrived
	// later; a window at least as long as the slowest request puts every
	// line back in arrival order. The zero value replays in log order.
	ReorderWindow time.Duration
	// MaxProblems is how many malformed and out-of-order lines are kept
	// with their line numbers (all are counted). Default 100.
	MaxProblems int
	// OnRequest, if set, is called with every replayed request's
	// decisions, in replay order, and with every line logged as invalid
	// when it is read.
	OnRequest func(Request)
}

// Input is one access log to replay.
type Input struct {
	// Name names the log in messages: its path, or "-" for stdin.
	Name string
	// R reads the log: one JSON line per request, as --access-log writes.
	R io.Reader
}

// Request is one request's decisions, for Config.OnRequest.
type Request struct {
	// File and Line locate the request's line in the inputs.
	File string
	Line int64
	// Time is the logged instant the request was decided at.
	Time time.Time
	// Candidate and Baseline are the decisions under the two rule sets;
	// Baseline is meaningful only with a Config.Baseline. A line logged
	// as invalid is not replayed; both are proxy.DecisionInvalid.
	Candidate, Baseline proxy.Decision
	// App and Rule are the candidate's app label and matched rule.
	App, Rule string
}

// Counts counts the decisions of one rule set over some requests.
type Counts struct {
	// Requests is every request counted; Admitted + Limited.
	Requests int64
	// Admitted were forwarded (allowed, unmatched or shadow-limited).
	Admitted int64
	// Limited were answered 429.
	Limited int64
	// ShadowLimited were admitted although a shadow rule would have
	// limited them (they are among Admitted).
	ShadowLimited int64
}

func (c *Counts) add(d proxy.Decision) {
	c.Requests++
	switch d {
	case proxy.DecisionLimited:
		c.Limited++
	case proxy.DecisionShadowLimited:
		c.Admitted++
		c.ShadowLimited++
	default:
		c.Admitted++
	}
}

// Bucket counts admitted and limited requests in one interval of a
// replay's time series, under each rule set (the baseline's are zero
// without one).
type Bucket struct {
	CandidateAdmitted, CandidateLimited int64
	BaselineAdmitted, BaselineLimited   int64
}

// Group is the requests of one app and rule, as the candidate
// classified them, and their decisions under both rule sets.
type Group struct {
	// App is the app label: a configured app ID, or "*" for every other
	// caller.
	App string
	// Rule is the matched rule pattern, "" when no rule matched.
	Rule string
	// Candidate and Baseline count the group's requests under each rule
	// set. The baseline may have matched them to other rules: the rows
	// compare the same requests, grouped the candidate's way.
	Candidate, Baseline Counts
	// Series counts the requests per interval of Result.Step from
	// Result.Origin.
	Series []Bucket
}

// LimitedChange is how many more requests the candidate limits than the
// baseline.
func (g *Group) LimitedChange() int64 { return g.Candidate.Limited - g.Baseline.Limited }

// Caller is one caller that was limited under either rule set.
type Caller struct {
	// App is the caller's configured app ID; "" for an unknown caller,
	// identified by IP.
	App string
	// IP is an unknown caller's client IP ("" if the peer had none).
	IP string
	// Candidate and Baseline count the caller's requests under each.
	Candidate, Baseline Counts
}

// Name is how the caller is shown: its app ID, or its client IP.
func (c *Caller) Name() string {
	switch {
	case c.App != "":
		return c.App
	case c.IP != "":
		return c.IP
	}
	return "(no client IP)"
}

// NewlyLimited reports whether the candidate limits the caller and the
// baseline never did.
func (c *Caller) NewlyLimited() bool { return c.Candidate.Limited > 0 && c.Baseline.Limited == 0 }

// NoLongerLimited reports whether the baseline limited the caller and the
// candidate never does.
func (c *Caller) NoLongerLimited() bool {
	return c.Baseline.Limited > 0 && c.Candidate.Limited == 0
}

// LineProblem is a line that could not be replayed as it stood.
type LineProblem struct {
	// File names the input, Line is 1-based.
	File string
	Line int64
	// Msg says what is wrong.
	Msg string
}

// String formats p as "file:line: msg".
func (p LineProblem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// Result is what a replay found.
type Result struct {
	// Files are the inputs' names, in replay order.
	Files []string
	// Candidate and Baseline are the rule sets (Baseline nil if none).
	Candidate, Baseline *proxy.RuleSet
	// Lines is the number of lines read, blank ones included.
	Lines int64
	// Requests is the number of requests replayed.
	Requests int64
	// Invalid is the number of requests logged as invalid (400) or
	// unauthorized (401/403), refused before any limit: they are not
	// replayed.
	Invalid int64
	// Other is the number of JSON lines that are not access records (a
	// "msg" other than "access": other logs sharing the file).
	Other int64
	// Malformed is the number of lines that are not access records that
	// can be replayed; MalformedLines are the first of them.
	Malformed      int64
	MalformedLines []LineProblem
	// Late is the number of requests that were more than the reorder
	// window out of time order and were replayed late, at their own
	// time; LateLines are the first of them.
	Late      int64
	LateLines []LineProblem
	// First and Last are the times of the earliest and latest replayed
	// requests.
	First, Last time.Time
	// Origin and Step define the time series: bucket i of a Series
	// counts the requests in [Origin+i·Step, Origin+(i+1)·Step).
	Origin time.Time
	Step   time.Duration
	// Total counts every replayed request.
	Total Group
	// Groups are the requests by the candidate's app and rule, those whose
	// limited count changed most first, then by app and rule.
	Groups []*Group
	// Callers are the callers limited under either rule set: newly limited
	// ones first, then no longer limited ones, then the rest, each by how
	// much their limited count changed.
	Callers []*Caller
	// Elapsed is how long the replay took.
	Elapsed time.Duration
}

// HasBaseline reports whether the replay compared with a baseline.
func (r *Result) HasBaseline() bool { return r.Baseline != nil }

// maxSeriesBuckets bounds every series: when a replay spans more seconds
// than this, buckets widen (by doubling) instead of growing in number.
const maxSeriesBuckets = 4096

// sweepEvery is how often, in log time, the replay stores evict idle keys.
const sweepEvery = time.Minute

// Files replays the access logs at paths, in the order given ("-"
// is stdin; a name ending in .gz is decompressed). Every file is opened
// before the replay starts, so a missing one fails at once.
func Files(cfg Config, paths []string) (*Result, error) {
	var inputs []Input
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	for _, p := range paths {
		if p == "-" {
			inputs = append(inputs, Input{Name: "-", R: os.Stdin})
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("opening access log: %w", err)
		}
		closers = append(closers, f)
		var r io.Reader = f
		if strings.HasSuffix(p, ".gz") {
			zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
			if err != nil {
				return nil, fmt.Errorf("opening access log %s: %w", p, err)
			}
			closers = append(closers, zr)
			r = zr
		}
		inputs = append(inputs, Input{Name: p, R: r})
	}
	return Run(cfg, inputs...)
}

// Replay runs every request of the access logs, in order, through the
// candidate rules and, if set, the baseline rules, each on a fresh memory
// store, at the instants the log recorded. It drives the real proxy.Handler, so
// matching and limiting are exactly the live gateway's. Malformed lines
// are counted and skipped; only a read error fails the replay.
func Run(cfg Config, inputs ...Input) (*Result, error) {
	if cfg.Candidate == nil {
		return nil, errors.New("replay needs candidate rules")
	}
	if cfg.MaxProblems == 0 {
		cfg.MaxProblems = 100
	}
	start := time.Now()
	rp := &replayer{
		cfg:     cfg,
		res:     &Result{Candidate: cfg.Candidate, Baseline: cfg.Baseline, Step: time.Second},
		groups:  make(map[groupKey]*Group),
		callers: make(map[callerKey]*Caller),
		parser:  newLineParser(),
	}
	var err error
	if rp.cand, err = newReplayRun(cfg.Candidate, cfg.MaxKeys); err != nil {
		return nil, err
	}
	if cfg.Baseline != nil {
		if rp.base, err = newReplayRun(cfg.Baseline, cfg.MaxKeys); err != nil {
			return nil, err
		}
	}
	rp.queue = reorderQueue{window: int64(cfg.ReorderWindow), emit: rp.enqueue, late: rp.lateRecord}
	rp.batch = make([]replayRecord, 0, replayBatch)
	rp.candOut, rp.baseOut = make([]replayOutcome, replayBatch), make([]replayOutcome, replayBatch)
	if rp.base != nil {
		rp.baseWork, rp.baseDone = make(chan struct{}), make(chan struct{})
		go rp.baselineWorker()
		defer close(rp.baseWork)
	}
	for i, in := range inputs {
		rp.res.Files = append(rp.res.Files, in.Name)
		if err := rp.read(i, in.R); err != nil {
			return nil, fmt.Errorf("reading access log %s: %w", in.Name, err)
		}
	}
	rp.queue.flush()
	rp.decideBatch()
	rp.finish()
	rp.res.Elapsed = time.Since(start)
	return rp.res, nil
}

// maxLine is the longest line read; a longer one is malformed.
const maxLine = 4 << 20

// replayer is the state of one Replay.
type replayer struct {
	cfg        Config
	res        *Result
	cand, base *replayRun
	parser     *lineParser
	rec        replayRecord // the line being read
	queue      reorderQueue
	groups     map[groupKey]*Group
	callers    map[callerKey]*Caller
	origin     int64 // Unix seconds of bucket 0
	step       int64 // seconds per bucket
	started    bool

	// The requests being decided, and their outcomes under each rule set.
	batch            []replayRecord
	candOut, baseOut []replayOutcome
	baseWork         chan struct{} // a batch for the baseline worker
	baseDone         chan struct{} // the worker has decided it
}

type groupKey struct{ app, rule string }

// callerKey is a configured app ID (app true) or a client IP.
type callerKey struct {
	app bool
	id  string
}

// read replays the lines of one input.
func (rp *replayer) read(file int, r io.Reader) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var long []byte // a line longer than the buffer, assembled
	var lineNo int64
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long) <= maxLine {
				long = append(long, chunk...)
			}
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		line := chunk
		if len(long) > 0 {
			line = append(long, chunk...)
			long = nil
		}
		if len(line) > 0 {
			lineNo++
			rp.res.Lines++
			rp.line(file, lineNo, line)
		}
		if err != nil {
			return nil
		}
	}
}

// line parses one line and queues its request.
func (rp *replayer) line(file int, lineNo int64, line []byte) {
	if len(line) > maxLine {
		rp.malformed(file, lineNo, fmt.Sprintf("line is longer than %d MiB", maxLine>>20))
		return
	}
	rec := &rp.rec
	kind, err := rp.parser.parse(line, rec)
	switch kind {
	case lineBlank:
		return
	case lineOther:
		rp.res.Other++
		return
	case lineMalformed:
		rp.malformed(file, lineNo, err.Error())
		return
	}
	rec.file, rec.line = file, lineNo
	if rec.invalid {
		rp.res.Invalid++
		if rp.cfg.OnRequest != nil {
			rp.cfg.OnRequest(Request{
				File: rp.res.Files[file], Line: lineNo, Time: rec.t,
				Candidate: proxy.DecisionInvalid, Baseline: proxy.DecisionInvalid,
			})
		}
		return
	}
	rp.queue.push(rec)
}

func (rp *replayer) malformed(file int, line int64, msg string) {
	rp.res.Malformed++
	if len(rp.res.MalformedLines) < rp.cfg.MaxProblems {
		rp.res.MalformedLines = append(rp.res.MalformedLines, LineProblem{File: rp.res.Files[file], Line: line, Msg: msg})
	}
}

func (rp *replayer) lateRecord(r *replayRecord) {
	rp.res.Late++
	if len(rp.res.LateLines) < rp.cfg.MaxProblems {
		behind := time.Duration(rp.queue.lastT - r.t.UnixNano())
		rp.res.LateLines = append(rp.res.LateLines, LineProblem{
			File: rp.res.Files[r.file], Line: r.line,
			Msg: fmt.Sprintf("%s before a request already replayed", behind),
		})
	}
}

// replayBatch is how many requests are decided at a time: the candidate
// in the replay's goroutine while the baseline is decided in another.
const replayBatch = 1024

// enqueue adds a request to the batch, and decides the batch when full.
func (rp *replayer) enqueue(rec *replayRecord) {
	rp.batch = append(rp.batch, *rec)
	if len(rp.batch) == replayBatch {
		rp.decideBatch()
	}
}

// decideBatch runs the batch through the rule sets, the two in parallel,
// then counts the outcomes in order.
func (rp *replayer) decideBatch() {
	n := len(rp.batch)
	if n == 0 {
		return
	}
	if rp.base != nil {
		rp.baseWork <- struct{}{}
	}
	rp.cand.decideAll(rp.batch, rp.candOut[:n])
	if rp.base != nil {
		<-rp.baseDone
	}
	for i := range rp.batch {
		rp.count(&rp.batch[i], rp.candOut[i], rp.baseOut[i])
		rp.batch[i] = replayRecord{}
	}
	rp.batch = rp.batch[:0]
}

// baselineWorker decides each batch under the baseline rules when told.
// The channels order its reads and writes of the batch with decideBatch's.
func (rp *replayer) baselineWorker() {
	for range rp.baseWork {
		rp.base.decideAll(rp.batch, rp.baseOut[:len(rp.batch)])
		rp.baseDone <- struct{}{}
	}
}

// count adds one request's outcomes to the result.
func (rp *replayer) count(rec *replayRecord, c, b replayOutcome) {
	if c.decision == proxy.DecisionInvalid {
		// The parser checked the app ID and that the path is absolute;
		// the handler found something else wrong, so the gateway cannot
		// have logged this line as it stands.
		rp.malformed(rec.file, rec.line, fmt.Sprintf("the gateway rejects this request as invalid (path %q)", rec.path))
		return
	}
	if !rp.started {
		rp.started = true
		rp.origin, rp.step = rec.t.Unix(), 1
		rp.res.First, rp.res.Last = rec.t, rec.t
	}
	rp.res.Requests++
	if rec.t.Before(rp.res.First) {
		rp.res.First = rec.t
	}
	if rec.t.After(rp.res.Last) {
		rp.res.Last = rec.t
	}

	g := rp.groups[groupKey{c.app, c.api}]
	if g == nil {
		g = &Group{App: c.app, Rule: c.api}
		rp.groups[groupKey{c.app, c.api}] = g
	}
	i := rp.bucket(rec.t)
	for _, g := range [2]*Group{g, &rp.res.Total} {
		g.Candidate.add(c.decision)
		if i >= len(g.Series) {
			g.Series = slices.Grow(g.Series, i+1-len(g.Series))[:i+1]
		}
		bk := &g.Series[i]
		if c.decision == proxy.DecisionLimited {
			bk.CandidateLimited++
		} else {
			bk.CandidateAdmitted++
		}
		if rp.base != nil {
			g.Baseline.add(b.decision)
			if b.decision == proxy.DecisionLimited {
				bk.BaselineLimited++
			} else {
				bk.BaselineAdmitted++
			}
		}
	}

	key := callerKey{id: rec.ip}
	switch {
	case c.app != config.UnknownApp:
		key = callerKey{app: true, id: c.app}
	case rp.base != nil && b.app != config.UnknownApp:
		key = callerKey{app: true, id: b.app}
	}
	cl := rp.callers[key]
	if cl == nil {
		cl = &Caller{}
		if key.app {
			cl.App = key.id
		} else {
			cl.IP = key.id
		}
		rp.callers[key] = cl
	}
	cl.Candidate.add(c.decision)
	if rp.base != nil {
		cl.Baseline.add(b.decision)
	}

	if rp.cfg.OnRequest != nil {
		rp.cfg.OnRequest(Request{
			File: rp.res.Files[rec.file], Line: rec.line, Time: rec.t,
			Candidate: c.decision, Baseline: b.decision, App: c.app, Rule: c.api,
		})
	}
}

// bucket returns the series index of t, widening every series' buckets
// when t lies beyond maxSeriesBuckets of them. A request before the first
// one (replayed late) counts in bucket 0.
func (rp *replayer) bucket(t time.Time) int {
	off := t.Unix() - rp.origin
	if off < 0 {
		return 0
	}
	for off/rp.step >= maxSeriesBuckets {
		rp.widen()
	}
	return int(off / rp.step)
}

// widen doubles the width of every series' buckets.
func (rp *replayer) widen() {
	rp.step *= 2
	merge := func(s []Bucket) []Bucket {
		n := (len(s) + 1) / 2
		for i := 0; i < n; i++ {
			a := s[2*i]
			if 2*i+1 < len(s) {
				b := s[2*i+1]
				a.CandidateAdmitted += b.CandidateAdmitted
				a.CandidateLimited += b.CandidateLimited
				a.BaselineAdmitted += b.BaselineAdmitted
				a.BaselineLimited += b.BaselineLimited
			}
			s[i] = a
		}
		clear(s[n:])
		return s[:n]
	}
	rp.res.Total.Series = merge(rp.res.Total.Series)
	for _, g := range rp.groups {
		g.Series = merge(g.Series)
	}
}

// finish sorts the groups and callers into the result.
func (rp *replayer) finish() {
	res := rp.res
	res.Step = time.Duration(rp.step) * time.Second
	if rp.started {
		res.Origin = time.Unix(rp.origin, 0).In(res.First.Location())
	}
	n := len(res.Total.Series)
	res.Total.Series = pad(res.Total.Series, n)
	for _, g := range rp.groups {
		g.Series = pad(g.Series, n)
		res.Groups = append(res.Groups, g)
	}
	slices.SortFunc(res.Groups, func(a, b *Group) int {
		return cmp.Or(
			cmp.Compare(abs(b.LimitedChange()), abs(a.LimitedChange())),
			cmp.Compare(b.LimitedChange(), a.LimitedChange()),
			cmp.Compare(b.Candidate.Limited, a.Candidate.Limited),
			strings.Compare(a.App, b.App),
			strings.Compare(a.Rule, b.Rule),
		)
	})
	for _, c := range rp.callers {
		if c.Candidate.Limited > 0 || c.Baseline.Limited > 0 {
			res.Callers = append(res.Callers, c)
		}
	}
	rank := func(c *Caller) int {
		switch {
		case c.NewlyLimited():
			return 0
		case c.NoLongerLimited():
			return 1
		}
		return 2
	}
	slices.SortFunc(res.Callers, func(a, b *Caller) int {
		da, db := a.Candidate.Limited-a.Baseline.Limited, b.Candidate.Limited-b.Baseline.Limited
		return cmp.Or(
			cmp.Compare(rank(a), rank(b)),
			cmp.Compare(abs(db), abs(da)),
			cmp.Compare(b.Candidate.Limited, a.Candidate.Limited),
			strings.Compare(a.App, b.App),
			strings.Compare(a.IP, b.IP),
		)
	})
}

// pad extends s with empty buckets to n.
func pad(s []Bucket, n int) []Bucket {
	if len(s) < n {
		s = slices.Grow(s, n-len(s))[:n]
	}
	return s
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// replayOutcome is what the handler decided for one request.
type replayOutcome struct {
	app, api string
	decision proxy.Decision
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

func newReplayRun(rs *proxy.RuleSet, maxKeys int) (*replayRun, error) {
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
		// The request is reused: the handler must leave its header be.
		ForwardAppHeader: true,
		// The log holds only callers the live gateway let through.
		TrustKeys: true,
		// No headers: they change nothing that is decided, and cost.
		Headers:   proxy.HeadersNone,
		Now:       func() time.Time { return run.now },
		Logger:    slog.New(slog.DiscardHandler),
		Observers: []proxy.Observer{run},
		// The claim values the live gateway verified and logged.
		ReplayClaims: func(*http.Request) *jwtauth.Claims {
			if len(run.claims) == 0 {
				return nil
			}
			return jwtauth.ClaimsOf(run.claims)
		},
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

// setKeys puts the logged key values in the request: headers, and the
// query string (the log keeps only the values keyed limits read).
func (run *replayRun) setKeys(keys []keyValue) {
	var q []string
	for _, kv := range keys {
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
}

// ObserveRequest records the outcome. It implements proxy.Observer.
func (run *replayRun) ObserveRequest(_ *http.Request, o *proxy.Outcome) {
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
	_ proxy.Observer      = (*replayRun)(nil)
	_ http.ResponseWriter = (*discardWriter)(nil)
)
