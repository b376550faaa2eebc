package replay

import (
	"bufio"
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"

	"github.com/ratelimit-gateway/gateway/internal/config"
)

// Config configures Replay.
type Config struct {
	// Candidate is the rule set to try. Required.
	Candidate *ruleset.Set
	// Baseline is the rule set to compare with (the rules in force), or
	// nil for none.
	Baseline *ruleset.Set
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
	// as invalid is not replayed; both are observe.DecisionInvalid.
	Candidate, Baseline observe.Decision
	// App and Rule are the candidate's app label and matched rule.
	App, Rule string
}

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
				Candidate: observe.DecisionInvalid, Baseline: observe.DecisionInvalid,
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
	if c.decision == observe.DecisionInvalid {
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
		if c.decision == observe.DecisionLimited {
			bk.CandidateLimited++
		} else {
			bk.CandidateAdmitted++
		}
		if rp.base != nil {
			g.Baseline.add(b.decision)
			if b.decision == observe.DecisionLimited {
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
