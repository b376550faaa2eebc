package source

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ratelimit-gateway/gateway/internal/backoff"
	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/safefile"
)

// ZKAuth are the credentials and TLS files of a ZooKeeper source: digest
// authentication (ZooKeeper's user:password scheme) and the PEM files of
// a TLS connection. The password comes from the environment or from a
// file, never from the URL or a flag, so that it does not show in ps or
// in /rules.
type ZKAuth struct {
	// Username and Password, when Username is set, authenticate the
	// session; the znodes `gateway rules push` creates are then
	// readable and writable by that user only (ZooKeeper's auth ACL).
	Username, Password string
	// PasswordFile, exclusive with Password, is a file whose trimmed
	// contents are the password.
	PasswordFile string
	// CAFile verifies the servers' certificates (the system roots when
	// empty); CertFile and KeyFile are a client certificate, for a
	// server that requires one. Any of them, or the zks:// scheme,
	// turns TLS on.
	CAFile, CertFile, KeyFile string
}

// zkSessionTimeout is the session timeout the client asks for: the server
// keeps the session, and so the watches, that long after losing the
// client, which reconnects within it and misses nothing.
const zkSessionTimeout = 10 * time.Second

// ZK is the rules in one ZooKeeper znode, watched (docs/sources.md, "Rules for
// a fleet"). Its version is the znode's data version.
type ZK struct {
	*remote
	conn *zk.Conn
	// acl is that of the znodes Put creates.
	acl []zk.ACL
	// digest is "user:password", or "" without credentials.
	digest string
	// kick receives when a session is established, so that Watch
	// checks the znode at once after a reconnection.
	kick chan struct{}

	dialMu sync.Mutex
	// dialErr is why the last connection attempt failed, nil once one
	// succeeded: a request that finds no connection until its deadline
	// fails with it rather than with a bare timeout.
	dialErr error
	// tried holds, for each address the client tried, how its last
	// attempt went (refusedAll); servers is the number of servers in the
	// URL; refusal is the last attempt refused on a certificate, nil
	// once one succeeded, which explains a failure before dialErr does.
	tried   map[string]attempt
	servers int
	refusal error

	authMu sync.Mutex
	// authed reports whether the credentials were added to the
	// connection, which then adds them again after every reconnection.
	authed bool
}

var _ Store = (*ZK)(nil)

// ParseZKURL splits zk://host:port[,host:port]/path (zks:// for TLS) into
// its servers and the znode's path.
func ParseZKURL(spec string) (servers []string, path string, tlsOn bool, err error) {
	scheme, rest, _ := strings.Cut(spec, "://")
	hosts, p, _ := strings.Cut(rest, "/")
	switch {
	case scheme != "zk" && scheme != "zks":
		return nil, "", false, fmt.Errorf("%s: the scheme must be zk:// or zks://", spec)
	case strings.Contains(hosts, "@"):
		return nil, "", false, fmt.Errorf("%s: put no credentials in the URL; set GATEWAY_ZK_USERNAME and GATEWAY_ZK_PASSWORD (or --zk-password-file)", scheme+"://…")
	case hosts == "":
		return nil, "", false, fmt.Errorf("%s: no ZooKeeper server; write %s://host:2181/gateway/rules", spec, scheme)
	case p == "" || strings.HasSuffix(p, "/"):
		return nil, "", false, fmt.Errorf("%s: no znode path; write %s://host:2181/gateway/rules", spec, scheme)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return nil, "", false, fmt.Errorf("%s: the znode path /%s has an empty, . or .. element", spec, p)
		}
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" || !strings.Contains(h, ":") {
			return nil, "", false, fmt.Errorf("%s: server %q is not host:port", spec, h)
		}
		servers = append(servers, h)
	}
	return servers, "/" + p, scheme == "zks", nil
}

// NewZK returns the ZooKeeper source of cfg.Spec. It does not wait for
// ZooKeeper to answer: the client connects, and reconnects, on its own.
func NewZK(cfg Config) (*ZK, error) {
	servers, path, tlsOn, err := ParseZKURL(cfg.Spec)
	if err != nil {
		return nil, err
	}
	a := cfg.ZK
	var tc *tls.Config
	if tlsOn || a.CAFile != "" || a.CertFile != "" || a.KeyFile != "" {
		if tc, err = clientTLS("zk", a.CAFile, a.CertFile, a.KeyFile); err != nil {
			return nil, err
		}
	}
	switch {
	case a.Password != "" && a.PasswordFile != "":
		return nil, errors.New("GATEWAY_ZK_PASSWORD and --zk-password-file are exclusive: set one")
	case a.PasswordFile != "":
		data, err := safefile.Read(a.PasswordFile, safefile.MaxSecretBytes)
		if err != nil {
			return nil, fmt.Errorf("--zk-password-file: %w", err)
		}
		a.Password = strings.TrimSpace(string(data))
	}
	if a.Username == "" && a.Password != "" {
		return nil, errors.New("a ZooKeeper password without a user: set GATEWAY_ZK_USERNAME (or --zk-username) too")
	}
	z := &ZK{remote: newRemote(cfg, "zk", path), acl: zk.WorldACL(zk.PermAll), kick: make(chan struct{}, 1),
		tried: make(map[string]attempt), servers: len(servers)}
	if a.Username != "" {
		z.digest, z.acl = a.Username+":"+a.Password, zk.AuthACL(zk.PermAll)
	}
	z.conn, _, err = zk.Connect(servers, zkSessionTimeout,
		zk.WithLogInfo(false), zk.WithLogger(zkLogger{z.log}), zk.WithDialer(z.dialer(tc)),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
				select {
				case z.kick <- struct{}{}:
				default:
				}
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Spec, err)
	}
	return z, nil
}

// dialer returns the ZooKeeper client's dialer: TCP, then, with tc, a TLS
// handshake that verifies the server's certificate under the host of its
// address. It records why an attempt failed for the requests that wait
// meanwhile (see explain).
func (z *ZK) dialer(tc *tls.Config) zk.Dialer {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := z.dial(network, addr, timeout, tc)
		z.dialMu.Lock()
		z.dialErr = err
		a := attemptOf(err)
		z.tried[addr] = a
		switch a {
		case connected:
			z.refusal = nil
		case refused:
			z.refusal = err
		}
		z.dialMu.Unlock()
		return c, err
	}
}

// refusedAll reports whether the last attempt at every address the
// client tried, at least one for each server of the URL, failed, and at
// least one on a certificate: a request waiting for a connection then
// fails at once, with why (explain), rather than when its deadline
// passes. Addresses that are merely down (a refused connection, a
// timeout) keep it waiting while none refused a certificate.
func (z *ZK) refusedAll() bool {
	z.dialMu.Lock()
	defer z.dialMu.Unlock()
	return len(z.tried) >= z.servers && noneLetIn(maps.Values(z.tried))
}

func (z *ZK) dial(network, addr string, timeout time.Duration, tc *tls.Config) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("zk: connecting to %s: %w", addr, err)
	}
	if tc == nil {
		return c, nil
	}
	// The handshake gets the request timeout rather than the client's
	// one-second connect timeout: a JVM's first handshakes are slow.
	ctx, cancel := context.WithTimeout(context.Background(), z.timeout)
	defer cancel()
	tlsConn := tls.Client(c, serverTLS(tc, addr))
	if err := tlsConn.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("zk: TLS handshake with %s: %w", addr, err)
	}
	return tlsConn, nil
}

// explain adds to err, a request's failure while the client had no
// connection (its deadline passed, or zk.ErrNoServer), why the last
// connection attempt failed, or the last refused on a certificate if
// one was: a refused certificate says so rather than timing out. Other
// errors are returned as they are.
func (z *ZK) explain(err error) error {
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, zk.ErrNoServer) {
		return err
	}
	z.dialMu.Lock()
	dialErr := cmp.Or(z.refusal, z.dialErr)
	z.dialMu.Unlock()
	if dialErr == nil {
		return err
	}
	return fmt.Errorf("%w (%w)", dialErr, err)
}

// zkLogger sends the ZooKeeper client's messages (each failed connection
// attempt) to the debug level: the source's status says what matters.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zookeeper client: " + fmt.Sprintf(format, args...))
}

// do runs f, requests of z's ZooKeeper client, which take no context,
// until ctx is done. While the client has no connection it fails a
// request at once, unsent (zk.ErrNoServer): do tries again until ctx is
// done, unless the servers refused a certificate (refusedAll), and so
// does it after a connection lost with the request in flight if
// idempotent. A request that found no connection fails with why
// (z.explain).
func do[T any](ctx context.Context, z *ZK, idempotent bool, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	wait := backoff.Backoff{Base: 50 * time.Millisecond, Max: time.Second}
	for {
		ch := make(chan result, 1)
		go func() {
			v, err := f()
			ch <- result{v, err}
		}()
		var r result
		select {
		case r = <-ch:
		case <-ctx.Done():
			return r.v, z.explain(ctx.Err())
		}
		retry := errors.Is(r.err, zk.ErrNoServer) && !z.refusedAll() || idempotent && errors.Is(r.err, zk.ErrConnectionClosed)
		if !retry || !sleep(ctx, wait.Next()) {
			return r.v, z.explain(r.err)
		}
	}
}

// ready adds the credentials to the connection, once.
func (z *ZK) ready(ctx context.Context) error {
	if z.digest == "" {
		return nil
	}
	z.authMu.Lock()
	defer z.authMu.Unlock()
	if z.authed {
		return nil
	}
	if _, err := do(ctx, z, true, func() (struct{}, error) { return struct{}{}, z.conn.AddAuth("digest", []byte(z.digest)) }); err != nil {
		return fmt.Errorf("authenticating to ZooKeeper: %w", err)
	}
	z.authed = true
	return nil
}

// Key returns the znode's path.
func (z *ZK) Key() string { return z.key }

// String returns zk://servers/path.
func (z *ZK) String() string { return z.name }

// Close closes the connection.
func (z *ZK) Close() error {
	z.conn.Close()
	return nil
}

// Load reads the znode and parses its data with Parse; the version is
// its data version. When the store cannot be reached on the first load,
// it falls back to the cache file, if there is one.
func (z *ZK) Load(ctx context.Context) (*config.Rules, string, error) {
	return z.load(ctx, z.get)
}

// get reads the znode's data, version and mzxid (0 when it does not
// exist).
func (z *ZK) get(ctx context.Context) (Value, int64, error) {
	if err := z.ready(ctx); err != nil {
		return Value{}, 0, err
	}
	type got struct {
		data []byte
		stat *zk.Stat
	}
	g, err := do(ctx, z, true, func() (got, error) {
		data, stat, err := z.conn.Get(z.key)
		return got{data, stat}, err
	})
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return Value{Version: NoVersion}, 0, nil
	case errors.Is(err, zk.ErrNoAuth):
		return Value{}, 0, fmt.Errorf("%w: the znode's ACL does not let these credentials read it; set GATEWAY_ZK_USERNAME and GATEWAY_ZK_PASSWORD (or --zk-password-file) to those it was written with", err)
	case err != nil:
		return Value{}, 0, err
	}
	return Value{Data: g.data, Version: int64(g.stat.Version)}, g.stat.Mzxid, nil
}

// stamp returns the znode's mzxid, 0 if it does not exist.
func (z *ZK) stamp(ctx context.Context) (int64, error) {
	if err := z.ready(ctx); err != nil {
		return 0, err
	}
	stat, err := do(ctx, z, true, func() (*zk.Stat, error) {
		ok, stat, err := z.conn.Exists(z.key)
		if !ok {
			stat = nil
		}
		return stat, err
	})
	if err != nil || stat == nil {
		return 0, err
	}
	return stat.Mzxid, nil
}

// Watch calls onChange when the znode changes (a ZooKeeper watch, set
// again after each event), and when the store answers again after it did
// not: the rules are read again on reconnection. Every probe interval,
// and as soon as a session is established, it checks the store and the
// znode's mzxid, so that a change a lost watch missed is still seen.
// onChange is never called twice for the same value unless the store was
// unreachable in between; it may be called from two goroutines at once.
func (z *ZK) Watch(ctx context.Context, onChange func()) error {
	probed := z.probeEvery(ctx, z.kick, func(ctx context.Context) { z.check(ctx, z.stamp, onChange) })
	defer func() { <-probed }()

	wait := backoff.Backoff{Max: maxBackoff}
	for {
		events, stamp, err := z.watchOnce(ctx)
		if err != nil {
			if !sleep(ctx, wait.Next()) {
				return nil
			}
			continue
		}
		wait.Reset()
		z.notify(stamp, false, onChange)
		// Any event (the data changed, the znode was created or
		// deleted, or the session expired and the watch with it) sets
		// the watch again.
		select {
		case <-ctx.Done():
			return nil
		case <-events:
		}
	}
}

// watchOnce sets a watch on the znode (on its data, or on its creation
// if it does not exist) and returns its events and the znode's mzxid.
func (z *ZK) watchOnce(ctx context.Context) (<-chan zk.Event, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, z.timeout)
	defer cancel()
	if err := z.ready(ctx); err != nil {
		return nil, 0, err
	}
	type set struct {
		events <-chan zk.Event
		stat   *zk.Stat
	}
	s, err := do(ctx, z, true, func() (set, error) {
		_, stat, events, err := z.conn.GetW(z.key)
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, stat, events, err = z.conn.ExistsW(z.key)
			if ok {
				// Created in between: read it through GetW next time.
				return set{events, stat}, err
			}
			stat = nil
		}
		return set{events, stat}, err
	})
	if err != nil {
		return nil, 0, err
	}
	if s.stat == nil {
		return s.events, 0, nil
	}
	return s.events, s.stat.Mzxid, nil
}
