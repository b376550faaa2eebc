// Package alert tells when a caller's budget crosses a threshold: the
// percentages of a limit set by alerts: [80, 100] on a rule or a plan
// (docs/plans-and-tokens.md, "Budget alerts"). Each threshold fires once
// per caller per window — once per fleet when the gateways share a Once
// on Redis — as a metric and as a signed POST to a webhook.
//
// It reads the outcome of each request after the request path has
// decided it, and must never slow a request: the webhook is called from a
// bounded queue by a worker of its own, with retries and backoff; when
// the queue is full an alert is dropped and counted.
package alert

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/backoff"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// Defaults of Config.
const (
	DefaultQueue    = 1000
	DefaultAttempts = 5
	DefaultBackoff  = time.Second
	DefaultTimeout  = 5 * time.Second
	// DefaultMemo bounds the thresholds a gateway remembers having seen
	// fired, so that callers it tracks cost bounded memory.
	DefaultMemo = 100_000
)

// claimBuffer bounds the thresholds seen crossed that wait to be claimed
// (a Redis call each). Past it one is left for the caller's next request
// to see again.
const claimBuffer = 4096

// SignatureHeader is the header of a webhook call that holds the
// HMAC-SHA256 of its body with the shared secret, in hex, after "sha256=".
const SignatureHeader = "X-Gateway-Signature"

// Once reports whether key is claimed for the first time: true once for
// a key until ttl has passed, false after. A fleet shares one on Redis
// (redisstore.Store.Once) so that a threshold fires once per fleet.
type Once interface {
	Once(ctx context.Context, key string, ttl time.Duration) (bool, error)
}

// Config configures a Notifier. The zero value tells only the metric.
type Config struct {
	// URL is the webhook that receives each alert as a POST of JSON
	// (Alert); "" sends none.
	URL string
	// Secret signs each call's body (SignatureHeader); nil sends no
	// signature.
	Secret []byte
	// Queue bounds the alerts waiting to be sent. Default DefaultQueue.
	Queue int
	// Attempts bounds the calls of one alert; a call that fails (no
	// answer, or a status other than 2xx) is retried after a backoff
	// starting at Backoff, doubling up to 30 times it. Defaults
	// DefaultAttempts and DefaultBackoff.
	Attempts int
	Backoff  time.Duration
	// Timeout bounds one call. Default DefaultTimeout.
	Timeout time.Duration
	// Once claims each threshold of each caller's window; nil claims
	// them in this process.
	Once Once
	// Memo bounds the claims remembered in this process. Default
	// DefaultMemo.
	Memo int
	// Client calls the webhook. Default a client with Timeout.
	Client *http.Client
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Registerer takes the alert metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger logs failed calls, at most one a second. Default
	// slog.Default().
	Logger *slog.Logger
}

// Alert is the JSON body of a webhook call.
type Alert struct {
	// Type is always "budget_alert".
	Type string `json:"type"`
	App  string `json:"app"`
	// API is the rule's pattern, "" for the app's total.
	API  string `json:"api"`
	Plan string `json:"plan,omitempty"`
	// Key is the caller within the limit, as /top shows it: "" for a
	// limit with one counter.
	Key string `json:"key,omitempty"`
	// Threshold is the percentage crossed.
	Threshold int   `json:"threshold"`
	Limit     int64 `json:"limit"`
	// Used is what the caller had used of the limit when the threshold
	// was seen crossed.
	Used int64 `json:"used"`
	// Unit is the limit's window; WindowStart and WindowEnd the window
	// the threshold fired in.
	Unit        string    `json:"unit"`
	WindowStart time.Time `json:"windowStart"`
	WindowEnd   time.Time `json:"windowEnd"`
	// Time is when it fired.
	Time time.Time `json:"time"`
}

// Stats are what a Notifier did, for tests and metrics.
type Stats struct {
	// Fired are thresholds claimed by this gateway; Queued the alerts
	// put in the queue, Dropped those the full queue refused; Sent and
	// Failed the alerts whose calls succeeded or gave up.
	Fired, Queued, Dropped, Sent, Failed int64
}

// Notifier fires alerts. It is an observe.Observer, safe for concurrent
// use; Close stops it.
type Notifier struct {
	cfg   Config
	once  Once
	queue chan Alert
	memo  *memo
	stop  context.CancelFunc
	ctx   context.Context
	wg    sync.WaitGroup
	// claims are the claims waiting for Once, at most one per key.
	claims  chan claim
	pending sync.Map // key → struct{}

	fired, queued, dropped, sent, failed atomic.Int64
	firedVec                             *prometheus.CounterVec
	calls                                *prometheus.CounterVec
	lastLog                              atomic.Int64
}

// claim is a threshold seen crossed, to be claimed.
type claim struct {
	key string
	ttl time.Duration
	a   Alert
}

var _ observe.Observer = (*Notifier)(nil)

// New returns a Notifier of cfg, its workers started.
func New(cfg Config) (*Notifier, error) {
	if cfg.URL != "" {
		u, err := url.Parse(cfg.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("alert webhook %q is not an http:// or https:// URL", cfg.URL)
		}
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Memo <= 0 {
		cfg.Memo = DefaultMemo
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, stop := context.WithCancel(context.Background())
	n := &Notifier{
		cfg: cfg, once: cfg.Once, queue: make(chan Alert, cfg.Queue), memo: newMemo(cfg.Memo, cfg.Now),
		ctx: ctx, stop: stop, claims: make(chan claim, claimBuffer),
		firedVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_budget_alerts_total",
			Help: "Budget alert thresholds crossed, once per caller per window (per fleet on Redis), by app, rule and threshold.",
		}, []string{"app", "api", "threshold"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_alert_webhook_total",
			Help: "Budget alerts by what became of their webhook call: sent, failed (after every retry) or dropped (the queue was full).",
		}, []string{"result"}),
	}
	if n.once == nil {
		n.once = n.memo
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{n.firedVec, n.calls} {
			if err := cfg.Registerer.Register(c); err != nil {
				stop()
				return nil, fmt.Errorf("registering the alert metrics: %w", err)
			}
		}
	}
	n.wg.Add(2)
	go n.claimer()
	go n.sender()
	return n, nil
}

// Close stops the workers; alerts still queued are not sent.
func (n *Notifier) Close() {
	n.stop()
	n.wg.Wait()
}

// Stats returns what n did so far.
func (n *Notifier) Stats() Stats {
	return Stats{Fired: n.fired.Load(), Queued: n.queued.Load(), Dropped: n.dropped.Load(), Sent: n.sent.Load(), Failed: n.failed.Load()}
}

// ObserveRequest looks for thresholds the request's limits crossed. It
// implements observe.Observer and never blocks: a threshold seen crossed
// is handed to a worker that claims it, or dropped when the workers are
// behind (the next request of the caller sees it again).
func (n *Notifier) ObserveRequest(o *observe.Outcome) {
	if o.StoreError {
		// Decided on this gateway's share of the limits (--fail-mode
		// local), whose counts are not the caller's.
		return
	}
	var now time.Time
	for _, l := range o.Limits() {
		if len(l.Alerts) == 0 || l.Params == nil || l.Limit <= 0 || l.Limit != l.Params.Limit || l.Shadow {
			continue
		}
		used := l.Limit - max(l.Remaining, 0)
		if l.Deferred {
			used += l.Charged - l.Reserved
		}
		if o.Decision == observe.DecisionLimited && !l.Allowed {
			used = l.Limit // refused: the budget is spent
		}
		if used <= 0 {
			continue
		}
		var start, end time.Time
		for _, pct := range l.Alerts {
			// used ≥ pct% of the limit, in integers.
			if used*100 < int64(pct)*l.Limit {
				break
			}
			if now.IsZero() {
				now = n.cfg.Now()
				start, end = windowOf(now, l.Params)
			}
			key := "gw:alert:{" + l.App + "}:" + l.API + "|" + l.Key + "|" + strconv.FormatInt(start.UnixNano(), 36) + "|" + strconv.Itoa(pct)
			if n.memo.has(key, now) {
				continue
			}
			c := claim{key: key, ttl: end.Sub(now) + time.Minute, a: Alert{
				Type: "budget_alert", App: l.App, API: l.API, Plan: l.Plan, Key: l.Key, Threshold: pct,
				Limit: l.Limit, Used: used, Unit: l.Params.Unit(), WindowStart: start.UTC(), WindowEnd: end.UTC(), Time: now.UTC(),
			}}
			if n.cfg.Once == nil {
				// Claimed in this process: no call to wait for.
				n.claimOne(c)
				continue
			}
			if _, busy := n.pending.LoadOrStore(key, struct{}{}); busy {
				continue
			}
			select {
			case n.claims <- c:
			default:
				n.pending.Delete(key)
			}
		}
	}
}

// windowOf returns the window of p that holds now: its calendar period,
// or the multiple of its unit since the Unix epoch (a sliding window's
// alerts fire once per such period).
func windowOf(now time.Time, p *limit.Params) (start, end time.Time) {
	if p.Calendar != "" {
		s, e := p.CalendarSpan(now.UnixNano())
		return time.Unix(0, s), time.Unix(0, e)
	}
	w := int64(p.Window)
	if w <= 0 {
		return now, now
	}
	t := now.UnixNano()
	s := t - ((t%w)+w)%w
	return time.Unix(0, s), time.Unix(0, s+w)
}

// claimer claims the thresholds seen crossed, and queues the alerts of
// those this gateway claimed first.
func (n *Notifier) claimer() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case c := <-n.claims:
			n.claimOne(c)
		}
	}
}

func (n *Notifier) claimOne(c claim) {
	defer n.pending.Delete(c.key)
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	first, err := n.once.Once(ctx, c.key, c.ttl)
	cancel()
	if err != nil {
		n.logf("claiming a budget alert failed; the next request over the threshold tries again", "key", c.key, "err", err)
		return
	}
	// Claimed here or elsewhere: this gateway need not ask again in
	// this window.
	n.memo.add(c.key, n.cfg.Now().Add(c.ttl))
	if !first {
		return
	}
	n.fired.Add(1)
	n.firedVec.WithLabelValues(c.a.App, c.a.API, strconv.Itoa(c.a.Threshold)).Inc()
	if n.cfg.URL == "" {
		return
	}
	select {
	case n.queue <- c.a:
		n.queued.Add(1)
	default:
		n.dropped.Add(1)
		n.calls.WithLabelValues("dropped").Inc()
	}
}

// sender calls the webhook for each queued alert.
func (n *Notifier) sender() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case a := <-n.queue:
			if n.send(a) {
				n.sent.Add(1)
				n.calls.WithLabelValues("sent").Inc()
			} else if n.ctx.Err() == nil {
				n.failed.Add(1)
				n.calls.WithLabelValues("failed").Inc()
			}
		}
	}
}

// send calls the webhook with a, retrying with backoff; it reports
// whether a call succeeded.
func (n *Notifier) send(a Alert) bool {
	body, err := json.Marshal(a)
	if err != nil {
		return false
	}
	b := backoff.Backoff{Base: n.cfg.Backoff, Max: 30 * n.cfg.Backoff}
	for attempt := 1; ; attempt++ {
		err := n.call(body)
		if err == nil {
			return true
		}
		if attempt >= n.cfg.Attempts {
			n.logf("a budget alert's webhook call failed; giving up", "attempts", attempt, "err", err)
			return false
		}
		t := time.NewTimer(b.Next())
		select {
		case <-n.ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// call makes one webhook call of body.
func (n *Notifier) call(body []byte) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if n.cfg.Secret != nil {
		req.Header.Set(SignatureHeader, Sign(n.cfg.Secret, body))
	}
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return errors.New("the webhook answered " + resp.Status)
	}
	return nil
}

// Sign returns the SignatureHeader value of body: "sha256=" and the hex
// HMAC-SHA256 of body with secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether sig, a SignatureHeader value, signs body with
// secret, in constant time.
func Verify(secret, body []byte, sig string) bool {
	return hmac.Equal([]byte(sig), []byte(Sign(secret, body)))
}

// logf logs at most once a second.
func (n *Notifier) logf(msg string, args ...any) {
	now := time.Now().Unix()
	if last := n.lastLog.Load(); last == now || !n.lastLog.CompareAndSwap(last, now) {
		return
	}
	n.cfg.Logger.Warn(msg, args...)
}

// memo remembers claimed keys until they expire, at most max of them; a
// full one drops the expired, and then takes no new key until one
// expires. It is also the in-process Once, which then claims nothing:
// a threshold is told at most once, never twice.
type memo struct {
	mu  sync.Mutex
	max int
	now func() time.Time
	m   map[string]time.Time
}

func newMemo(max int, now func() time.Time) *memo {
	return &memo{max: max, now: now, m: map[string]time.Time{}}
}

func (m *memo) has(key string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	exp, ok := m.m[key]
	return ok && now.Before(exp)
}

func (m *memo) add(key string, exp time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.addLocked(key, exp)
}

func (m *memo) addLocked(key string, exp time.Time) {
	if len(m.m) >= m.max {
		now := m.now()
		for k, e := range m.m {
			if !now.Before(e) {
				delete(m.m, k)
			}
		}
		if len(m.m) >= m.max {
			return
		}
	}
	m.m[key] = exp
}

// Once claims key in this process.
func (m *memo) Once(_ context.Context, key string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if exp, ok := m.m[key]; ok && now.Before(exp) {
		return false, nil
	}
	if len(m.m) >= m.max {
		m.addLocked(key, now.Add(ttl)) // sweeps the expired
		_, ok := m.m[key]
		return ok, nil
	}
	m.m[key] = now.Add(ttl)
	return true, nil
}
