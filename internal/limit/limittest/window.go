package limittest

import "time"

// QuietWindow returns a window of at least least whose fixed windows
// (and buckets, multiples of it since the Unix epoch, as the window
// algorithms count them) do not end within margin of now, before or
// after: for a test on a real clock (Redis's, or the gateway's) that
// counts as if no window ended while it runs. A window of an hour ends
// on every hour, and a test that starts at 19:59:59 sees its counts
// start afresh. A window twice as long ends at some of the same instants,
// so 2·QuietWindow is quiet too.
func QuietWindow(least, margin time.Duration, now time.Time) time.Duration {
	for w := least; ; w += time.Hour {
		at := time.Duration(now.UnixNano() % int64(w))
		if at >= margin && w-at > margin {
			return w
		}
	}
}
