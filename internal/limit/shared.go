package limit

import (
	"errors"
	"fmt"
	"time"
)

// What a store shared by a fleet of gateways (the Redis store) and its
// callers agree on, so that callers need to know only this package.

// ErrCircuitOpen is returned by a shared store, without a network call,
// while its circuit breaker is open: its server failed repeatedly and the
// store waits before it tries again.
var ErrCircuitOpen = errors.New("redis circuit breaker is open")

// AdmittedLocally tells the store whose Allow returned err that the
// request was then admitted by a local decision (--fail-mode local), so
// that a store that can count it later does so exactly once (the Redis
// store: not again if Redis ran the call late and counted it, else as a
// charge when Redis answers). It returns where the acts that follow the
// admission go (its charges and releases), or nil when the store keeps
// none (other errors, other stores).
func AdmittedLocally(err error) Alone {
	var lc interface{ AdmittedLocally() Alone }
	if errors.As(err, &lc) {
		return lc.AdmittedLocally()
	}
	return nil
}

// Alone is a shared store's journal of one request that a gateway
// admitted alone while the store failed (--fail-mode local): the acts
// that follow the admission reach the fleet through it exactly once, in
// the order they came, when the store answers again — or are dropped
// once the window they count in has ended (docs/fleet.md, "When Redis
// fails"). It is safe for concurrent use.
type Alone interface {
	// Follow records acts that follow the admission, at the gateway's
	// clock now: charges (Charge) and releases (Release)
	// of the admitted request's limits, with the fleet's Params, not
	// the local share's. Other requests are ignored.
	Follow(now time.Time, reqs []Request)
}

// CallerBuckets is the number of tags CallerTag spreads callers over.
const CallerBuckets = 64

// callerTags are CallerTag's values: "~00" to "~63". No app ID contains
// "~", so they name no app's slot.
var callerTags = func() (t [CallerBuckets]string) {
	for i := range t {
		t[i] = fmt.Sprintf("~%02d", i)
	}
	return t
}()

// CallerTag returns the Request.Tag of a call whose every request is
// keyed by caller (a client address group): one of CallerBuckets tags,
// chosen by a hash of caller that every gateway computes alike. The
// Redis store places keys by their tag, so callers spread over
// CallerBuckets Redis Cluster slots, and so over a Cluster's masters.
func CallerTag(caller string) string {
	// FNV-1a, 32 bits.
	h := uint32(2166136261)
	for i := 0; i < len(caller); i++ {
		h ^= uint32(caller[i])
		h *= 16777619
	}
	return callerTags[h%CallerBuckets]
}
