package proxy

import (
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

// lingerDelay is how long a refused connection stays open for reading
// after its response is sent and its write side closed: closing it with
// unread body bytes at once would send a TCP reset, which can destroy
// the response in the client's receive buffer before it is read. It is
// net/http's own delay for the same case (rstAvoidanceDelay).
const lingerDelay = 500 * time.Millisecond

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
	if cw, ok := conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		time.AfterFunc(lingerDelay, func() { conn.Close() })
		return
	}
	conn.Close()
}
