package source

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

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

// Defaults of an etcd source.
const (
	// DefaultTimeout bounds one request to the store.
	DefaultTimeout = 5 * time.Second
	// DefaultProbeInterval is how often Watch checks that the store
	// answers and that it has missed no change.
	DefaultProbeInterval = 5 * time.Second
	// maxBackoff bounds the wait before watching again after a watch
	// failed.
	maxBackoff = 10 * time.Second
)

// Etcd is the rules in one etcd key, watched (the README's "Rules for a
// fleet"). Its version is the key's mod revision.
type Etcd struct {
	name      string // etcd://endpoints/key, for messages
	key       string
	client    *clientv3.Client
	maxBytes  int64
	cacheFile string
	timeout   time.Duration
	probe     time.Duration
	log       *slog.Logger

	mu     sync.Mutex
	status Status
	// loaded reports whether a load has succeeded (from the store or
	// the cache): only a first load falls back to the cache.
	loaded bool
	// notified is the mod revision Watch last told of (0: the key did
	// not exist), so that it never reports the same value twice.
	notified int64
	// cached is the mod revision last written to the cache file.
	cached int64
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
	if tlsOn || a.CAFile != "" || a.CertFile != "" {
		if cc.TLS, err = etcdTLS(a); err != nil {
			return nil, err
		}
	}
	c, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Spec, err)
	}
	e := &Etcd{
		name: cfg.Spec, key: key, client: c, maxBytes: cfg.MaxBytes, cacheFile: cfg.CacheFile,
		timeout: cmpOr(cfg.Timeout, DefaultTimeout), probe: cmpOr(cfg.ProbeInterval, DefaultProbeInterval),
		log: cfg.Logger.With("source", cfg.Spec),
	}
	e.status = Status{Source: e.name, Since: time.Now()}
	return e, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func etcdTLS(a EtcdAuth) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if a.CAFile != "" {
		pem, err := os.ReadFile(a.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-ca %s: no PEM certificate in it", a.CAFile)
		}
	}
	if a.CertFile != "" || a.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(a.CertFile, a.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert and --etcd-key: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// Client returns the etcd client, for `gateway rules`.
func (e *Etcd) Client() *clientv3.Client { return e.client }

// Key returns the key the rules are in.
func (e *Etcd) Key() string { return e.key }

// String returns etcd://endpoints/key.
func (e *Etcd) String() string { return e.name }

// Close closes the client.
func (e *Etcd) Close() error { return e.client.Close() }

// Status reports the connection's state and the version in force.
func (e *Etcd) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

// setConnected records whether the store answered, logging changes.
func (e *Etcd) setConnected(ok bool, err error) (was bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	was = e.status.Connected
	if ok != was {
		e.status.Since = time.Now()
		if ok {
			e.log.Info("rule store reachable")
		} else {
			e.log.Warn("rule store unreachable; keeping the rules in force and retrying", "err", err)
		}
	}
	e.status.Connected, e.status.Error = ok, ""
	if err != nil {
		e.status.Error = err.Error()
	}
	return was
}

// Load reads the key and parses its value with Parse. When the store cannot be reached on the first load,
// it falls back to the cache file, if there is one.
func (e *Etcd) Load(ctx context.Context) (*config.Rules, string, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	resp, err := e.client.Get(ctx, e.key)
	if err != nil {
		e.setConnected(false, err)
		e.mu.Lock()
		first := !e.loaded
		e.mu.Unlock()
		if first && e.cacheFile != "" {
			return e.loadCache(err)
		}
		hint := ""
		if first {
			hint = "; pass --rules-cache FILE to start from the last rules read when etcd is down"
		}
		return nil, "", fmt.Errorf("reading rules from %s: %w%s", e.name, err, hint)
	}
	e.setConnected(true, nil)
	if len(resp.Kvs) == 0 {
		return nil, "", fmt.Errorf("%s: the key %s does not exist; write the rules there (gateway rules push)", e.name, e.key)
	}
	kv := resp.Kvs[0]
	if int64(len(kv.Value)) > e.maxBytes {
		return nil, "", fmt.Errorf("%s: the value is larger than %d bytes (--max-rules-bytes); the rules in force stay", e.name, e.maxBytes)
	}
	r, err := Parse(e.name, e.key, kv.Value)
	if err != nil {
		return nil, "", err
	}
	version := strconv.FormatInt(kv.ModRevision, 10)
	e.mu.Lock()
	e.loaded, e.notified = true, kv.ModRevision
	e.status.Version, e.status.FromCache = version, false
	writeCache := e.cacheFile != "" && e.cached != kv.ModRevision
	e.mu.Unlock()
	if writeCache {
		if err := writeFileAtomic(e.cacheFile, kv.Value); err != nil {
			e.log.Error("cannot write the rules cache", "path", e.cacheFile, "err", err)
		} else {
			e.mu.Lock()
			e.cached = kv.ModRevision
			e.mu.Unlock()
		}
	}
	return r, version, nil
}

// loadCache parses the cache file, the store being unreachable (cause).
func (e *Etcd) loadCache(cause error) (*config.Rules, string, error) {
	data, err := os.ReadFile(e.cacheFile)
	if err != nil {
		return nil, "", fmt.Errorf("reading rules from %s: %w; and the rules cache: %w", e.name, cause, err)
	}
	r, err := Parse(e.cacheFile, e.key, data)
	if err != nil {
		return nil, "", fmt.Errorf("reading rules from %s: %w; and the rules cache is not valid: %w", e.name, cause, err)
	}
	e.log.Warn("rule store unreachable at start; serving the rules cache until it answers", "cache", e.cacheFile, "err", cause)
	e.mu.Lock()
	e.loaded = true
	e.status.Version, e.status.FromCache = "cache", true
	e.mu.Unlock()
	return r, "cache", nil
}

// writeFileAtomic writes data to path through a temporary file renamed
// over it, so that a reader never sees half a file.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
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
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		t := time.NewTicker(e.probe)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				e.check(ctx, onChange)
			}
		}
	}()
	defer func() { <-probed }()

	backoff := 100 * time.Millisecond
	for {
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range e.client.Watch(wctx, e.key) {
			if err := resp.Err(); err != nil {
				e.setConnected(false, err)
				break
			}
			backoff = 100 * time.Millisecond
			for _, ev := range resp.Events {
				rev := ev.Kv.ModRevision
				if ev.Type == clientv3.EventTypeDelete {
					rev = 0
				}
				e.notify(rev, false, onChange)
			}
		}
		wcancel()
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// check asks the store for the key's mod revision, and calls onChange if
// it changed or if the store answers again.
func (e *Etcd) check(ctx context.Context, onChange func()) {
	rctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	resp, err := e.client.Get(rctx, e.key, clientv3.WithKeysOnly())
	if err != nil {
		if ctx.Err() == nil {
			e.setConnected(false, err)
		}
		return
	}
	was := e.setConnected(true, nil)
	var rev int64
	if len(resp.Kvs) > 0 {
		rev = resp.Kvs[0].ModRevision
	}
	e.notify(rev, !was, onChange)
}

// notify calls onChange if rev is not the revision last told of, or if
// force.
func (e *Etcd) notify(rev int64, force bool, onChange func()) {
	e.mu.Lock()
	changed := force || rev != e.notified
	e.notified = rev
	e.mu.Unlock()
	if changed {
		onChange()
	}
}
