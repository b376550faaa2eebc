package proxy

import (
	"net"
	"net/http"
	"time"
)

// A request the gateway refuses (400, 401, 403, 429, 503) is answered at
// once, and its body is never read. net/http, when a handler returns
// without reading the body, reads up to 256 KiB of it before it answers
// or closes, even with "Connection: close" (it does so to reuse the
// connection): a client that declares a large body and sends it a byte
// at a time would have every refusal wait, and hold its connection and
// goroutine, for as long as it likes. So a refusal of a request with a
// body says "Connection: close" (statusWriter), and closeUnread sends it
// and takes the connection from net/http to close it without reading.

// After the response, the connection's write side is closed at once (the
// client reads the response, then EOF), but the socket is kept open a
// little, reading and dropping what the client still sends: closing it
// with unread bytes would have the kernel send a reset, which can destroy
// the response in the client's receive buffer before it is read (the
// lingering close of nginx and of net/http itself). It is closed once the
// client has sent nothing for lingerIdle, and at most lingerMax after the
// response, however fast it sends: a slow-body flood holds each refused
// connection no longer than that.
// nginx's lingering_timeout and lingering_time are 5 s and 30 s; these
// are shorter, since a refusal, unlike a response nginx lingers after, is
// what a flood gets.
const (
	lingerIdle = 2 * time.Second
	lingerMax  = 10 * time.Second
)

// closeUnread sends the response written to sw and closes the connection
// without reading the request's body. Where the connection cannot be
// taken (HTTP/2, whose server resets the stream of an unread body
// itself), it leaves the response to net/http.
func closeUnread(sw *statusWriter) {
	rc := http.NewResponseController(sw.ResponseWriter)
	if rc.Flush() != nil {
		return
	}
	conn, _, err := rc.Hijack()
	if err != nil {
		return
	}
	cw, ok := conn.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		conn.Close()
		return
	}
	go linger(conn, time.Now())
}

// linger drops what the client sends on conn, whose write side is
// closed, until it pauses for lingerIdle or lingerMax has passed since
// start, and closes it.
func linger(conn net.Conn, start time.Time) {
	defer conn.Close()
	end := start.Add(lingerMax)
	var buf [512]byte
	for {
		deadline := time.Now().Add(lingerIdle)
		if deadline.After(end) {
			deadline = end
		}
		if conn.SetReadDeadline(deadline) != nil {
			return
		}
		if _, err := conn.Read(buf[:]); err != nil {
			return
		}
	}
}
