package proxy

import (
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/usage"
)

// This file charges a cost the response body reports, such as the tokens
// of an LLM API (cost: {body: usage.total_tokens}; docs/plans-and-tokens.md).
// The request is admitted holding its reserve (limit.Hold: room
// for it and every unit held, counting none) or, without one, when the
// limit has room for min, counting nothing; the body streams to the
// client untouched while a usage.Meter reads the bytes already sent; when
// the response ends the limit is charged what the response reported
// (capped by max; min when it reported nothing) and the reserve is given
// back in the same store call. A response that broke or was abandoned by
// its client is charged at least the reserve.

// bodyNeed returns what a request r asks of a limit cl with a body cost:
// its reserve, held until the response ends (Hold), or, without one,
// room for min, counted for none (Defer). An estimated reserve reads the
// request's body (sc.body) once; a priced one prices the estimate at the
// requested model's price (askedPrice, which keys has checked).
func bodyNeed(cl *ruleset.Limit, r *http.Request, sc *scratch) (units int64, deferred bool) {
	var vals []string
	if cl.Cost.ReserveHeader != "" {
		vals = r.Header[cl.Cost.ReserveHeader]
	}
	res := cl.Cost.ReserveFor(vals)
	if cl.Cost.Estimate {
		if !sc.body.read {
			sc.body.load(r, sc.bodyLimits())
		}
		est := cl.Cost.Max
		if cl.Cost.Price == nil {
			est = sc.body.estimate(cl.Cost.Max)
		} else if in, out, ok := sc.body.estimateTokens(); ok {
			p, _ := askedPrice(cl, sc)
			est = p.Cost(in, out)
		}
		res = max(res, min(est, cl.Cost.Max, cl.Params.Capacity()))
	}
	if res > 0 {
		return res, false
	}
	return cl.Cost.Min, true
}

// askedPrice returns the price of the model a request's body asks for
// (its "model") on a priced limit cl: the model's own, else the price of
// any other model; false when the table has neither, and the request is
// refused (unknownModel) before the upstream sees it.
func askedPrice(cl *ruleset.Limit, sc *scratch) (usage.Price, bool) {
	if p, ok := cl.Cost.Price.Named(sc.body.value("model")); ok {
		return p, true
	}
	return cl.Cost.Price.Other()
}

// unknownModel answers a request to a priced limit whose model the price
// table does not price, and has no price for any other model: nothing
// says what its tokens cost, so it is refused before the upstream is
// paid. It reports whether the request may go on.
func unknownModel(w http.ResponseWriter, r *http.Request, cl *ruleset.Limit, sc *scratch) bool {
	if !sc.body.read {
		sc.body.load(r, sc.bodyLimits())
	}
	if bodyRefused(w, sc) {
		return false
	}
	if _, ok := askedPrice(cl, sc); ok {
		return true
	}
	sc.o.Decision = observe.DecisionInvalid
	model := sc.body.value("model")
	if model == "" {
		WriteError(w, http.StatusBadRequest, "unknown_model", "the budget of "+cl.API+" is priced per model: send the model in the JSON body's \"model\" field")
		return false
	}
	if len(model) > 128 {
		model = model[:128] + "…"
	}
	WriteError(w, http.StatusBadRequest, "unknown_model", "the budget of "+cl.API+" has no price for the model "+strconv.Quote(model)+"; use a priced model")
	return false
}

// tokenTap feeds the bytes of a response sent to the client to the
// usage.Meters of its limits, created at the first byte from the
// response's headers: one for the fields a token budget adds up, one for
// a priced budget's tokens and model (either may be absent). A gzip body
// is decoded for the meters on the way (gunzip); the client gets the
// bytes as the upstream sent them.
type tokenTap struct {
	paths   []usage.Path
	inspect int
	// prices, when not nil, is the price table of the first priced
	// limit: a priced meter reads the tokens, and each priced limit
	// prices them by the model the response names, else asked, the
	// request's.
	prices *usage.Prices
	asked  string
	// m reads paths, pm a priced budget's fields; w writes to both.
	m, pm *usage.Meter
	w     io.Writer
	gz    *gunzip
	// started reports that the meters were made; off that the body
	// cannot be read: its Content-Encoding is not one the gateway
	// decodes.
	started, off bool
}

func (t *tokenTap) write(hdr http.Header, b []byte) {
	if t.off {
		return
	}
	if !t.started {
		t.started = true
		var ct string
		if v := hdr["Content-Type"]; len(v) > 0 {
			ct = v[0]
		}
		switch {
		case t.paths != nil && t.prices != nil:
			t.m, t.pm = usage.NewMeter(t.paths, ct, t.inspect), usage.NewPricedMeter(ct, t.inspect)
			t.w = io.MultiWriter(t.m, t.pm)
		case t.prices != nil:
			t.pm = usage.NewPricedMeter(ct, t.inspect)
			t.w = t.pm
		default:
			t.m = usage.NewMeter(t.paths, ct, t.inspect)
			t.w = t.m
		}
		switch encoding(hdr["Content-Encoding"]) {
		case "":
		case "gzip":
			t.gz = newGunzip(t.w)
		default:
			t.off = true
			return
		}
	}
	if t.gz != nil {
		t.gz.write(b)
		return
	}
	t.w.Write(b)
}

// end ends the body; it returns whether some of it could not be decoded.
// It is called once, before used.
func (t *tokenTap) end() (undecoded bool) {
	if !t.started || t.off {
		return t.off
	}
	if t.gz != nil && !t.gz.close() {
		undecoded = true
	}
	if t.m != nil {
		t.m.Close()
	}
	if t.pm != nil {
		t.pm.Close()
	}
	return undecoded
}

// used returns the usage the body reported for a limit, priced by prices
// when they are not nil, once end has ended it: whether it reported any, and whether some
// of the body could not be read (an encoding the gateway does not decode,
// a gzip stream that does not decode, a body or an event longer than
// inspect, a priced response whose model has no price): its usage is
// then unknown, not absent.
func (t *tokenTap) used(prices *usage.Prices, undecoded bool) (n int64, seen, unread bool) {
	if t.off {
		return 0, false, true
	}
	if !t.started {
		return 0, false, false
	}
	if prices != nil {
		in, out, seen := t.pm.Tokens()
		p, ok := prices.Resolve(t.pm.Model(), t.asked)
		if !ok {
			return 0, false, true
		}
		return p.Cost(in, out), seen, undecoded || t.pm.Skipped()
	}
	n, seen = t.m.Used()
	return n, seen, undecoded || t.m.Skipped()
}

// tokens returns the input and output tokens a priced response reported.
func (t *tokenTap) tokens() (in, out int64) {
	if t.pm == nil {
		return 0, 0
	}
	in, out, _ = t.pm.Tokens()
	return in, out
}

// encoding returns the one content coding of a response whose
// Content-Encoding values are ce, lower case: "" for none or identity,
// "gzip" for gzip or x-gzip (RFC 9110 §8.4.1.3), and "?" for codings
// the gateway does not read, several codings among them.
func encoding(ce []string) string {
	if len(ce) == 0 {
		return ""
	}
	if len(ce) > 1 || strings.IndexByte(ce[0], ',') >= 0 {
		return "?"
	}
	switch v := strings.ToLower(strings.TrimSpace(ce[0])); v {
	case "", "identity":
		return ""
	case "gzip", "x-gzip":
		return "gzip"
	}
	return "?"
}

// readableEncodings keeps in the Accept-Encoding of a request to the
// upstream only the codings the gateway can read a usage from: gzip and
// identity ("*" becomes gzip), with their weights, and "identity" when
// none is left. So a client that accepts br or zstd still gets a body it
// accepts, and one the gateway can charge. Without the header the
// Transport asks for gzip itself and decodes it.
func readableEncodings(hdr http.Header) {
	vals := hdr["Accept-Encoding"]
	if len(vals) == 0 {
		return
	}
	var keep []string
	star, gz := "", false
	for _, v := range vals {
		for item := range strings.SplitSeq(v, ",") {
			item = strings.TrimSpace(item)
			coding, params, _ := strings.Cut(item, ";")
			switch strings.ToLower(strings.TrimSpace(coding)) {
			case "gzip", "x-gzip":
				keep, gz = append(keep, item), true
			case "identity":
				keep = append(keep, item)
			case "*":
				star = "gzip"
				if params != "" {
					star += ";" + params
				}
			}
		}
	}
	if star != "" && !gz {
		keep = append(keep, star)
	}
	if len(keep) == 0 {
		hdr["Accept-Encoding"] = []string{"identity"}
		return
	}
	hdr["Accept-Encoding"] = []string{strings.Join(keep, ", ")}
}

// gunzip decodes a gzip body written to it into a usage.Meter, in a
// goroutine of its own: compress/gzip reads from an io.Reader and cannot
// be fed byte slices as they come, and a stream must be read as it goes
// (a broken one is charged the usage reported so far). Until close
// returns, the meter is the goroutine's.
type gunzip struct {
	pw   *io.PipeWriter
	done chan struct{}
	// err is the decoding's error, read after done is closed.
	err error
}

func newGunzip(m io.Writer) *gunzip {
	pr, pw := io.Pipe()
	g := &gunzip{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		zr, err := gzip.NewReader(pr)
		if err == nil {
			_, err = io.Copy(m, zr)
		}
		if err != nil {
			g.err = err
		}
		// A body that does not decode is not read further: the
		// writes that follow return at once.
		pr.CloseWithError(errGzipDone)
	}()
	return g
}

// errGzipDone fails the writes to a gunzip whose decoding has ended.
var errGzipDone = errors.New("the gzip body has been decoded")

// write hands b to the decoder; it returns once the decoder has taken
// it, or has ended.
func (g *gunzip) write(b []byte) { g.pw.Write(b) }

// close ends the body, waits for the decoder, and reports whether the
// whole body decoded.
func (g *gunzip) close() bool {
	g.pw.Close()
	<-g.done
	return g.err == nil
}

// startMetering arms sc's writer to read the usage of the body-cost limits
// that admitted the request. It returns nil when there are none.
func (h *Handler) startMetering(sc *scratch) *tokenTap {
	o := &sc.o
	var t *tokenTap
	for i, cl := range sc.lims[:len(o.Limits())] {
		if !cl.BodyCost() || !o.Limits()[i].Allowed {
			continue
		}
		if t == nil {
			t = &tokenTap{inspect: cl.Cost.Inspect}
		}
		// The limits of one request share its body: one meter reads the
		// paths of the first token budget, another the tokens of the
		// first priced one. Rules that read different fields of one
		// response, or price it apart, are not expected.
		switch {
		case cl.Cost.Price != nil && t.prices == nil:
			t.prices, t.asked = cl.Cost.Price, sc.body.value("model")
		case cl.Cost.Price == nil && t.paths == nil:
			t.paths = cl.Cost.Body
		}
	}
	if t != nil {
		sc.sw.tap, sc.fwd.readBody = t, true
	}
	return t
}

// chargeTokens adds to ow the charges of the body-cost limits of
// sc, for a response that has ended, whatever way it ended, and the
// releases of the reserves held: each is charged the usage reported
// (capped by max; min when none was), and at least its reserve when the
// response broke or its client left. It reports whether there was any
// such limit; settleCharges counts them.
func (h *Handler) chargeTokens(sc *scratch, t *tokenTap, broken bool, ow *owed) bool {
	sc.sw.tap = nil
	o := &sc.o
	undecoded := t.end()
	any := false
	for i, cl := range sc.lims[:len(o.Limits())] {
		if !cl.BodyCost() || !o.Limits()[i].Allowed {
			continue
		}
		any = true
		used, seen, unread := t.used(cl.Cost.Price, undecoded)
		q := sc.reqs[i]
		var reserved int64
		if q.Act == limit.Hold {
			reserved = q.Cost
			ow.release(q, i)
		}
		total := cl.Cost.Min
		switch {
		case seen:
			total = min(used, cl.Cost.Max)
			o.UpstreamCost, o.HasUpstreamCost = used, true
		case unread:
			// The usage could not be read, which is no sign it was
			// small: at least the reserve.
			total = max(total, reserved)
			o.Limits()[i].CostMissing = true
		default:
			o.Limits()[i].CostMissing = true
		}
		if !cl.Count.Matches(sc.sw.status) {
			total = 0
		}
		if broken {
			total = max(total, reserved)
		}
		o.Limits()[i].Charged, o.Limits()[i].Tokens, o.Limits()[i].Plan = total, true, cl.Plan
		if cl.Cost.Price != nil {
			l := &o.Limits()[i]
			l.Priced = true
			l.InputTokens, l.OutputTokens = t.tokens()
		}
		if total > 0 {
			ow.charge(q, i, total)
		}
	}
	return any
}
