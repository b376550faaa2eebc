package source

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ratelimit-gateway/gateway/internal/backoff"
	"github.com/ratelimit-gateway/gateway/internal/config"
)

// EtcdAuth are the credentials and TLS files of an etcd source. They come
// from the environment or from files, never from the URL, so that they do
// not show in ps or in /rules.
type EtcdAuth struct {
	// Username and Password authenticate to etcd when Username is set.
	Username, Password string
	// CAFile verifies the servers' certificates (the system roots when
	// empty); CertFile and KeyFile are a client certificate. Any of
	// them, or the etcds:// scheme, turns TLS on.
	CAFile, CertFile, KeyFile string
}

// Etcd is the rules in one etcd key, watched (docs/sources.md, "Rules for a
// fleet"). Its version is the key's mod revision.
type Etcd struct {
	*remote
	client    *clientv3.Client
	endpoints []string    // host:port
	tls       *tls.Config // nil without TLS
}

var _ Source = (*Etcd)(nil)

// ParseEtcdURL splits etcd://host:port[,host:port]/key (etcds:// for TLS)
// into its endpoints and key.
func ParseEtcdURL(spec string) (endpoints []string, key string, tlsOn bool, err error) {
	scheme, rest, _ := strings.Cut(spec, "://")
	hosts, path, _ := strings.Cut(rest, "/")
	switch {
	case scheme != "etcd" && scheme != "etcds":
		return nil, "", false, fmt.Errorf("%s: the scheme must be etcd:// or etcds://", spec)
	case strings.Contains(hosts, "@"):
		return nil, "", false, fmt.Errorf("%s: put no credentials in the URL; set GATEWAY_ETCD_USERNAME and GATEWAY_ETCD_PASSWORD (or --etcd-password-file)", scheme+"://…")
	case hosts == "":
		return nil, "", false, fmt.Errorf("%s: no etcd endpoint; write etcd://host:2379/key", spec)
	case path == "" || strings.HasSuffix(path, "/"):
		return nil, "", false, fmt.Errorf("%s: no key; write etcd://host:2379/gateway/rules", spec)
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" || !strings.Contains(h, ":") {
			return nil, "", false, fmt.Errorf("%s: endpoint %q is not host:port", spec, h)
		}
		p := "http://"
		if scheme == "etcds" {
			p = "https://"
		}
		endpoints = append(endpoints, p+h)
	}
	return endpoints, "/" + path, scheme == "etcds", nil
}

// NewEtcd returns the etcd source of cfg.Spec. It does not wait for etcd
// to answer.
func NewEtcd(cfg Config) (*Etcd, error) {
	endpoints, key, tlsOn, err := ParseEtcdURL(cfg.Spec)
	if err != nil {
		return nil, err
	}
	a := cfg.Etcd
	cc := clientv3.Config{
		Endpoints: endpoints, DialTimeout: DefaultTimeout,
		Username: a.Username, Password: a.Password,
		Logger: zap.NewNop(),
	}
	if tlsOn || a.CAFile != "" || a.CertFile != "" || a.KeyFile != "" {
		if cc.TLS, err = clientTLS("etcd", a.CAFile, a.CertFile, a.KeyFile); err != nil {
			return nil, err
		}
	}
	c, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Spec, err)
	}
	hosts := make([]string, len(endpoints))
	for i, ep := range endpoints {
		_, hosts[i], _ = strings.Cut(ep, "://")
	}
	return &Etcd{remote: newRemote(cfg, "etcd", key), client: c, endpoints: hosts, tls: cc.TLS}, nil
}

// probeTimeout bounds each endpoint's probe (probe).
const probeTimeout = time.Second

// refusalAfter is how long a request over TLS waits for etcd before the
// endpoints are probed for a refused certificate (refusing).
const refusalAfter = 500 * time.Millisecond

// refusing returns the context of a request to etcd made with ctx: over
// TLS, when etcd has not answered within refusalAfter and no endpoint
// then lets a client in, one at least refusing a certificate, it ends at
// once, with that refusal as its cause (unreachable returns it), rather
// than when its deadline passes: the etcd client would try the
// endpoints again until then, and fail the same way. Endpoints that are
// merely down leave the request waiting.
func (e *Etcd) refusing(ctx context.Context) (context.Context, context.CancelFunc) {
	if e.tls == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(refusalAfter, func() {
		if err := e.refused(); err != nil {
			cancel(err)
		}
	})
	return ctx, func() {
		t.Stop()
		cancel(nil)
	}
}

// refusalError is a request ended because every endpoint refused a
// connection, one at least on a certificate: found says what each
// endpoint did, errs are their probes' errors, which it wraps.
type refusalError struct {
	found []string
	errs  []error
}

func (r *refusalError) Error() string {
	return "etcd refused the connection at " + strings.Join(r.found, ", ")
}

func (r *refusalError) Unwrap() []error { return r.errs }

// refused probes the endpoints and returns a refusalError when none let
// a client in and one at least refused a certificate, else nil.
func (e *Etcd) refused() error {
	found, errs := e.probeAll()
	tries := make([]attempt, len(errs))
	for i, err := range errs {
		tries[i] = attemptOf(err)
	}
	if !noneLetIn(slices.Values(tries)) {
		return nil
	}
	return &refusalError{found: found, errs: errs}
}

// unreachable returns err, the failure of a request made with ctx
// (refusing): the refusal that ended it, if one did; and when err says
// only that etcd did not answer in time (the etcd client retries its
// endpoints until the deadline and then reports just "context deadline
// exceeded"), what probing each endpoint finds: "etcd did not answer at
// 10.0.0.1:2379 (dial tcp 10.0.0.1:2379: connect: connection refused),
// 10.0.0.2:2379 (accepts connections, but no etcd answer): context
// deadline exceeded".
func (e *Etcd) unreachable(ctx context.Context, err error) error {
	var refusal *refusalError
	if errors.As(context.Cause(ctx), &refusal) {
		return refusal
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	found, _ := e.probeAll()
	return fmt.Errorf("etcd did not answer at %s: %w", strings.Join(found, ", "), err)
}

// probeAll probes every endpoint at once (probe): it returns what each
// found, "host:port (why)", and the error of each probe.
func (e *Etcd) probeAll() ([]string, []error) {
	found, errs := make([]string, len(e.endpoints)), make([]error, len(e.endpoints))
	var wg sync.WaitGroup
	for i, ep := range e.endpoints {
		wg.Go(func() {
			err := e.probe(ep)
			errs[i] = err
			if err != nil {
				found[i] = fmt.Sprintf("%s (%v)", ep, err)
				return
			}
			found[i] = ep + " (accepts connections, but no etcd answer: is it etcd, and TLS as the URL says?)"
		})
	}
	wg.Wait()
	return found, errs
}

// probe connects to the endpoint ep as the client does, within
// probeTimeout, and returns nil when it lets a client in, else why not:
// TCP, then, over TLS, a handshake that verifies its certificate under
// its host, and a first read, which brings the server's refusal of the
// client's certificate under TLS 1.3 (its side of the handshake ends
// after the client's), or else the HTTP/2 server's first frame.
func (e *Etcd) probe(ep string) error {
	c, err := net.DialTimeout("tcp", ep, probeTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	if e.tls == nil {
		return nil
	}
	tc := serverTLS(e.tls, ep)
	tc.NextProtos = []string{"h2"}
	tlsConn := tls.Client(c, tc)
	tlsConn.SetDeadline(time.Now().Add(probeTimeout))
	if err := tlsConn.Handshake(); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	if _, err := tlsConn.Read(make([]byte, 1)); attemptOf(err) == refused {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	return nil
}

// Client returns the etcd client, for `gateway rules`.
func (e *Etcd) Client() *clientv3.Client { return e.client }

// Key returns the key the rules are in.
func (e *Etcd) Key() string { return e.key }

// String returns etcd://endpoints/key.
func (e *Etcd) String() string { return e.name }

// Close closes the client.
func (e *Etcd) Close() error { return e.client.Close() }

// Load reads the key and parses its value with Parse; the version is
// its mod revision. When the store cannot be reached on the first load,
// it falls back to the cache file, if there is one.
func (e *Etcd) Load(ctx context.Context) (*config.Rules, string, error) {
	return e.load(ctx, func(ctx context.Context) (Value, int64, error) {
		v, err := e.get(ctx)
		return v, max(v.Version, 0), err
	})
}

// get reads the key's value and mod revision.
func (e *Etcd) get(ctx context.Context) (Value, error) {
	ctx, done := e.refusing(ctx)
	defer done()
	resp, err := e.client.Get(ctx, e.key)
	if err != nil {
		return Value{}, e.unreachable(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return Value{Version: NoVersion}, nil
	}
	return Value{Data: resp.Kvs[0].Value, Version: resp.Kvs[0].ModRevision}, nil
}

// Watch calls onChange when the key changes (an etcd watch), and when the
// store answers again after it did not: the rules are read again on
// reconnection. Every probe interval it checks the store and the key's
// mod revision, so that a change a broken watch missed is still seen.
// onChange is never called twice for the same mod revision unless the
// store was unreachable in between; it may be called from two
// goroutines at once.
func (e *Etcd) Watch(ctx context.Context, onChange func()) error {
	// The probe runs apart: registering a watch waits for the store.
	probed := e.probeEvery(ctx, nil, func(ctx context.Context) { e.check(ctx, e.stamp, onChange) })
	defer func() { <-probed }()

	wait := backoff.Backoff{Max: maxBackoff}
	for {
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range e.client.Watch(wctx, e.key) {
			if err := resp.Err(); err != nil {
				e.setConnected(false, err)
				break
			}
			wait.Reset()
			for _, ev := range resp.Events {
				rev := ev.Kv.ModRevision
				if ev.Type == clientv3.EventTypeDelete {
					rev = 0
				}
				e.notify(rev, false, onChange)
			}
		}
		wcancel()
		if !sleep(ctx, wait.Next()) {
			return nil
		}
	}
}

// stamp returns the key's mod revision, 0 if it does not exist.
func (e *Etcd) stamp(ctx context.Context) (int64, error) {
	ctx, done := e.refusing(ctx)
	defer done()
	resp, err := e.client.Get(ctx, e.key, clientv3.WithKeysOnly())
	if err != nil {
		return 0, e.unreachable(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return resp.Kvs[0].ModRevision, nil
}
