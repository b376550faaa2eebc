package upstream

import (
	"context"
	"net"
	"time"
)

// WriteBounded returns dial, whose connections fail a write that the peer
// has not taken within d: an upstream that accepts a connection but stops
// reading a request's body (hung, or overloaded) would otherwise hold the
// request, and what the gateway read of its body, until the client gives
// up, since the wait for its response's headers (ResponseHeaderTimeout)
// starts only once the whole request is written. A client that sends its
// body slowly is not bounded by it: the gateway writes what it has. A
// write is at most a buffer's worth, so a peer that reads at all takes it
// well within d. d ≤ 0 returns dial.
func WriteBounded(dial func(ctx context.Context, network, addr string) (net.Conn, error), d time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if d <= 0 {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &writeBoundedConn{Conn: c, d: d}, nil
	}
}

// writeBoundedConn is a connection whose each write must end within d.
type writeBoundedConn struct {
	net.Conn
	d time.Duration
}

func (c *writeBoundedConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.d)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
