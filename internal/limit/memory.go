package limit

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"math/bits"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults of MemoryConfig.
const (
	DefaultShards  = 64
	DefaultMaxKeys = 1_000_000
)

// maxShards bounds MemoryConfig.Shards: more shards than this buy no
// concurrency and cost memory.
const maxShards = 1 << 16

// MemoryConfig configures a Memory store. The zero value gives the
// defaults.
type MemoryConfig struct {
	// Shards is the number of independently locked parts of the key
	// space, rounded up to a power of two, at most 65536. 0 means
	// DefaultShards (64).
	Shards int
	// MaxKeys is the number of keys beyond which a new key that has an
	// Overflow key is counted against that instead (--max-keys in the
	// docs/security.md, "Security" section). New keys without one are created
	// anyway. It is a soft cap: callers racing just below it may each add
	// a key. 0 means DefaultMaxKeys (1,000,000).
	MaxKeys int
}

// Memory is the in-process Store: a hash table from key to algorithm
// state, split into shards that are locked separately, so that decisions
// on different keys rarely contend and none takes a global lock.
//
// Keys are hashed with a random seed: callers choose the keys (client
// IPs), so a fixed hash would let them pile every key into one shard.
// One hash of the key picks both its shard and its slot there.
//
// Idle keys stay until Sweep evicts them (the server sweeps every
// minute); a shard's table shrinks when a sweep leaves it mostly empty.
//
// Create a Memory with NewMemory; the zero value is not usable. A Memory is
// safe for concurrent use.
type Memory struct {
	seed    maphash.Seed
	mask    uint64
	maxKeys int64
	shards  []shard
	// rules[i] interns the Params of shard i's entries: a rule's Params
	// are shared by all of its keys (a million client IPs), so an entry
	// points to one copy rather than holding its own. It holds the
	// Params keys of the shard were created or reshaped with; Sweep and
	// Forget drop those no key uses any more. It is per shard, guarded by
	// the shard's mutex, so that creating a key takes no lock but its
	// shard's.
	rules []map[Params]*Params
	// keys is written when a key is created or evicted; the padding keeps
	// those writes off the cache line of the fields above, which every
	// decision reads.
	_    [64]byte
	keys atomic.Int64
	_    [56]byte
}

var _ Store = (*Memory)(nil)

// intern returns shard s's copy of p. Shard s is locked.
func (m *Memory) intern(s uint32, p *Params) *Params {
	if q, ok := m.rules[s][*p]; ok {
		return q
	}
	if m.rules[s] == nil {
		m.rules[s] = map[Params]*Params{}
	}
	q := new(*p)
	m.rules[s][*p] = q
	return q
}

// pruneParams drops from shard s's interned Params those no entry uses
// any more, so that rule edits (each limit change interns new Params)
// leave nothing behind once the keys that used the old ones are reshaped
// or evicted. Shard s is locked.
func (m *Memory) pruneParams(s uint32) {
	rules := m.rules[s]
	if len(rules) == 0 {
		return
	}
	sh := &m.shards[s]
	if sh.n == 0 {
		m.rules[s] = nil
		return
	}
	used := make(map[*Params]struct{}, len(rules))
	for i, t := range sh.tags {
		if t != 0 {
			used[sh.ents[i].params] = struct{}{}
		}
	}
	for p, q := range rules {
		if _, ok := used[q]; !ok {
			delete(rules, p)
		}
	}
}

// entry is the state of one key, guarded by its shard's mutex.
type entry struct {
	// key is the entry's key, for lookups and Forget.
	key   string
	state State
	// params are the Params the state was last used with, interned:
	// Identity tells whether a reloaded rule can keep the state, and
	// Sweep asks Idle with them.
	params *Params
	// lockedUntil is the end of the key's lockout (Params.Lock), in
	// nanoseconds since the Unix epoch; the key is locked while now is
	// before it. Lockouts live here rather than in the States so that
	// every algorithm has them.
	lockedUntil int64
	// held are the units held by admitted Hold requests not released
	// yet (Hold); beside the state, like lockouts, so that every
	// algorithm has them.
	held int64
	// ahead is the latest instant room was reserved at on the key
	// (Request.Wait), in nanoseconds since the Unix epoch: the end of its
	// queue. While now is before it, the key decides at it, so that no
	// request overtakes one that waits.
	ahead int64
}

// lockout makes r, the Result of a locked key, a denial that lasts at
// least until the lockout's end: left is the time until then. r's Reset
// must be that of the state without the request (a denial's, or
// State.UncountedReset), since a locked key counts nothing.
func (r *Result) lockout(left time.Duration) {
	r.Allowed, r.Remaining = false, 0
	r.Reset = max(r.Reset, left)
	r.RetryAfter = max(r.RetryAfter, left)
}

// NewMemory returns an empty Memory store configured by cfg.
func NewMemory(cfg MemoryConfig) (*Memory, error) {
	if cfg.Shards < 0 || cfg.Shards > maxShards {
		return nil, fmt.Errorf("shards %d is outside 1..%d (0 for the default %d)", cfg.Shards, maxShards, DefaultShards)
	}
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("max keys %d is negative (0 for the default %d)", cfg.MaxKeys, DefaultMaxKeys)
	}
	shards := cmp.Or(cfg.Shards, DefaultShards)
	shards = 1 << bits.Len(uint(shards-1)) // round up to a power of two
	m := &Memory{
		seed:    maphash.MakeSeed(),
		mask:    uint64(shards - 1),
		maxKeys: int64(cmp.Or(cfg.MaxKeys, DefaultMaxKeys)),
		shards:  make([]shard, shards),
		rules:   make([]map[Params]*Params, shards),
	}
	return m, nil
}

// inline is the number of requests per call that Allow handles without
// allocating. The proxy sends at most two (the app total and one rule).
const inline = 4

// Allow implements Store. It decides reqs at now and counts the request
// against every limit that admitted it if no enforced limit denied it.
// When it reports false, nothing is counted, and each Result that
// admitted gives the Remaining and Reset of its limit without the
// request, as if it had never been decided.
//
// Lockouts (Params.Lock): when a limit with Params.Lock > 0 that is not a
// shadow denies, its key is locked for Lock from now, and every request
// on that key is denied until then, with Remaining 0 and a RetryAfter of
// at least the time left. A request denied while locked does not extend
// the lockout, and RetryAfter is also never less than the algorithm's
// own: a client that waits it out is admitted. Reset is the later of the
// lockout's end and the time until the limit, without the request, is
// fully replenished. A lockout concerns its key only: the other limits of
// the request are counted or not as usual.
//
// The keys of reqs (after overflow) must be distinct. Allow returns an
// error wrapping ErrUnknownAlgorithm for Params naming an unregistered
// algorithm, or the Validate error of Params used to create or reshape a
// key's state. ctx is not used: a decision is a hash and a table lookup.
func (m *Memory) Allow(ctx context.Context, now time.Time, reqs []Request, res []Result) (bool, error) {
	n := len(reqs)
	if len(res) < n {
		return false, fmt.Errorf("limit: %d results for %d requests", len(res), n)
	}
	if n > 1 && Repeats(reqs) {
		return AllowMerged(ctx, now, reqs, res, m.allow)
	}
	return m.allow(ctx, now, reqs, res)
}

// allow is Allow for requests of distinct counters.
func (m *Memory) allow(_ context.Context, now time.Time, reqs []Request, res []Result) (bool, error) {
	n := len(reqs)
	for i := range reqs {
		if reqs[i].Params == nil {
			return false, fmt.Errorf("limit: request for %q has no params", reqs[i].Key)
		}
	}
	ns := now.UnixNano()
	res = res[:n]
	// The cap is checked once, before locking: an Overflow shard is
	// locked only when it may be needed. Callers racing below the cap may
	// each add a key, so MaxKeys is exceeded by at most the number of
	// concurrent calls until the next Sweep.
	atCap := m.keys.Load() >= m.maxKeys

	// Per request: its entry, and the hashes of its Key and, when its
	// shard is locked, of its Overflow key.
	var (
		entBuf  [inline]*entry
		hashBuf [2 * inline]uint64
		lockBuf [2 * inline]uint32
	)
	ents, hashes, locks := entBuf[:], hashBuf[:], lockBuf[:0] // locks: shards to lock, ascending
	if n > inline {
		ents, hashes, locks = make([]*entry, n), make([]uint64, 2*n), make([]uint32, 0, 2*n)
	}
	ents, hashes = ents[:n], hashes[:2*n]
	for i := range reqs {
		r := &reqs[i]
		kh := m.hash(r.Key)
		hashes[2*i] = kh
		locks = insertSorted(locks, m.shardOf(kh))
		if atCap && r.Overflow != "" {
			oh := m.hash(r.Overflow)
			hashes[2*i+1] = oh
			locks = insertSorted(locks, m.shardOf(oh))
		}
	}

	// Ascending order: two calls sharing shards cannot deadlock. The
	// deferred unlock keeps a panicking algorithm from leaving a shard
	// locked.
	for _, s := range locks {
		m.shards[s].mu.Lock()
	}
	defer m.unlock(locks)

	waits := false
	for i := range reqs {
		r := &reqs[i]
		e, err := m.entryFor(r, hashes[2*i], atCap && r.Overflow != "", hashes[2*i+1])
		if err != nil {
			return false, err
		}
		ents[i] = e
		waits = waits || r.Wait > 0
	}
	at, allowed, heldOnly := m.decideAll(ns, ns, reqs, ents, res)
	if at > ns || (!allowed && waits) {
		// No room now, or a queue: the call waits if it may (reserve).
		if wait, ok := callWait(ns, reqs, ents, res); ok || at > ns {
			at, allowed, heldOnly = m.reserve(ns, at, wait, ok, reqs, ents, res, heldOnly)
		}
	}
	for i, e := range ents {
		switch r := &reqs[i]; {
		case r.Act == Charge:
			e.charge(ns, r, &res[i])
		case r.Act == Release:
			e.release(ns, r, &res[i])
		default:
			t := ns
			if allowed {
				t = max(at, e.ahead)
			}
			e.settle(t, r, &res[i], allowed, i < 64 && heldOnly&(1<<i) != 0)
			if r.Act == Read && r.Params.Limit > 0 {
				// At the instant it was decided at, as its Remaining.
				res[i].Over = e.state.Over(max(t, e.ahead), r.Params)
				res[i].Held = e.held
			}
			if r.Act == Read && allowed && at == ns && e.ahead > ns {
				// Decided at its key's queue's end: from now, the
				// queue longer (a refused call's reserve did this).
				res[i].fromQueue(time.Duration(e.ahead - ns))
			}
			if allowed && at > ns {
				res[i].Delay = time.Duration(at - ns)
				if r.Counts() {
					e.ahead = max(e.ahead, at)
				}
			}
		}
	}
	return allowed, nil
}

// decideAll decides the requests that take part in the decision at t, each
// on its entry at the later of t and the end of the entry's queue
// (entry.ahead), into res. It returns the latest instant a request was
// decided at, whether every enforced request was admitted, and which
// requests (of the first 64) were denied only for the units held by
// requests in flight. Only enforced requests move the instant: a shadow
// or a read behind a queue is decided there but waits for nothing. The
// shards are locked.
func (m *Memory) decideAll(ns, t int64, reqs []Request, ents []*entry, res []Result) (at int64, allowed bool, heldOnly uint64) {
	at, allowed = t, true
	for i := range reqs {
		r, e := &reqs[i], ents[i]
		if r.Act.follows() {
			continue
		}
		x := max(t, e.ahead)
		if r.Enforced() {
			at = max(at, x)
		}
		if r.Act == Hold && r.Params.Limit > 0 && e.held > 0 {
			e.decide(x, r.Params, r.Units()+e.held, &res[i])
			var alone Result
			if e.decide(x, r.Params, r.Units(), &alone); !res[i].Allowed && alone.Allowed && i < 64 {
				// Denied only for requests in flight, which may be
				// answered any moment: no lockout, and a short wait.
				heldOnly |= 1 << i
				res[i].RetryAfter = min(res[i].RetryAfter, HeldRetryAfter)
			}
		} else {
			e.decide(x, r.Params, r.Units(), &res[i])
		}
		if !res[i].Allowed && r.Enforced() {
			allowed = false
		}
	}
	return at, allowed, heldOnly
}

// decide writes the entry's Result for a request of n units at ns,
// lockout included, to res. Its shard is locked.
func (e *entry) decide(ns int64, p *Params, n int64, res *Result) {
	var ok bool
	if *res, ok = tooCostly(p, n); !ok {
		*res = e.state.Decide(ns, p, n)
	}
	if e.lockedUntil > ns {
		if res.Allowed {
			res.Reset = e.state.UncountedReset(ns, p)
		}
		res.lockout(time.Duration(e.lockedUntil - ns))
	}
}

// settle applies a decision to the entry: it counts the request when the
// request as a whole was admitted (allowed) and this limit admitted it,
// makes res that of the state without the request when this limit
// admitted it but it was not counted, and starts a lockout when this
// enforced limit denied it, unless only the units held by requests in
// flight did (heldOnly). Its shard is locked.
func (e *entry) settle(ns int64, r *Request, res *Result, allowed, heldOnly bool) {
	if !res.Allowed {
		if p := r.Params; p.Lock > 0 && r.Enforced() && e.lockedUntil <= ns && !heldOnly {
			e.lockedUntil = ns + int64(p.Lock)
			res.lockout(p.Lock)
		}
		return
	}
	if r.Act == Hold && r.Params.Limit > 0 {
		// Decided as if the units held and this request's were counted:
		// Remaining is what the held units leave, with this request's
		// when it holds them too. Nothing is counted.
		if allowed {
			e.held += r.Units()
		} else if res.Remaining >= 0 {
			res.Remaining += r.Units()
		}
		res.Reset = e.state.UncountedReset(ns, r.Params)
		return
	}
	if allowed && r.Counts() {
		if r.Params.Limit > 0 {
			e.state.Commit(ns, r.Params, r.Units())
		}
	} else if res.Remaining >= 0 {
		// Decided as if counted; it was not.
		res.Remaining += r.Units()
		res.Reset = e.state.UncountedReset(ns, r.Params)
	}
}

// release gives back units held (Release) and writes to res the
// Result of the limit it leaves, as charge does. Its shard is locked.
func (e *entry) release(ns int64, r *Request, res *Result) {
	e.held = max(e.held-r.Units(), 0)
	e.decide(ns, r.Params, 1+e.held, res)
	if res.Allowed && res.Remaining >= 0 {
		res.Remaining++
		res.Reset = e.state.UncountedReset(ns, r.Params)
	}
}

// charge counts a charge (Charge) and writes to res the Result
// of the limit it leaves, for a next request of one unit, lockout
// included. Its shard is locked.
func (e *entry) charge(ns int64, r *Request, res *Result) {
	if r.Params.Limit > 0 {
		e.state.Commit(ns, r.Params, r.Units())
	}
	e.decide(ns, r.Params, 1, res)
	if res.Allowed && res.Remaining >= 0 {
		res.Remaining++
		res.Reset = e.state.UncountedReset(ns, r.Params)
	}
}

// entryFor returns the entry that r is counted against, creating it (under
// the Overflow key when ovf and the store is full) or resetting its state
// if r.Params no longer fit it. kh is the hash of r.Key and oh that of
// r.Overflow when ovf. The shards involved are locked.
func (m *Memory) entryFor(r *Request, kh uint64, ovf bool, oh uint64) (*entry, error) {
	s := m.shardOf(kh)
	sh := &m.shards[s]
	e, slot := sh.find(r.Key, tagOf(kh))
	if e == nil {
		k, h := r.Key, kh
		if ovf && m.keys.Load() >= m.maxKeys {
			k, h, s = r.Overflow, oh, m.shardOf(oh)
			sh = &m.shards[s]
			e, slot = sh.find(k, tagOf(h))
		}
		if e == nil {
			a, err := algorithmFor(k, r.Params)
			if err != nil {
				return nil, err
			}
			// Clone: the caller's key may share memory with a larger
			// string (a request header) that the store would otherwise
			// keep.
			e = &entry{key: strings.Clone(k), state: a.NewState(r.Params), params: m.intern(s, r.Params)}
			sh.insert(slot, tagOf(h), e)
			m.keys.Add(1)
			return e, nil
		}
	}
	if *e.params == *r.Params {
		return e, nil
	}
	// A reloaded rule: validate once per change, not per decision.
	a, err := algorithmFor(r.Key, r.Params)
	if err != nil {
		return nil, err
	}
	if !e.params.Identity(r.Params) {
		e.state = a.NewState(r.Params)
	}
	// Otherwise only Limit, Burst, Warmup or Lock changed: the counts
	// stay and the new values apply from this decision on. A lockout in
	// progress runs to its end, unless the rule no longer locks out.
	if r.Params.Lock == 0 {
		e.lockedUntil = 0
	}
	e.params = m.intern(s, r.Params)
	return e, nil
}

// algorithmFor validates p, used to create or reshape key's state, and
// returns its algorithm.
func algorithmFor(key string, p *Params) (Algorithm, error) {
	a, ok := Lookup(p.Algorithm)
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownAlgorithm, p.Algorithm)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("limit: key %q: %w", key, err)
	}
	return a, nil
}

func (m *Memory) unlock(locks []uint32) {
	for i := len(locks) - 1; i >= 0; i-- {
		m.shards[locks[i]].mu.Unlock()
	}
}

// hash returns the hash of key, which picks its shard and its slot there.
// The seed is random, so that callers, who choose keys (client IPs),
// cannot pile them into one shard.
func (m *Memory) hash(key string) uint64 {
	return maphash.String(m.seed, key)
}

// shardOf returns the shard of the key whose hash is h.
func (m *Memory) shardOf(h uint64) uint32 {
	return uint32(h & m.mask)
}

// insertSorted adds s to the ascending set locks unless it is there. The
// set holds a few shards, so a linear scan and insertion beat a binary
// search and copy.
func insertSorted(locks []uint32, s uint32) []uint32 {
	for _, l := range locks {
		if l == s {
			return locks
		}
	}
	locks = append(locks, s)
	for i := len(locks) - 1; i > 0 && locks[i-1] > s; i-- {
		locks[i-1], locks[i] = s, locks[i-1]
	}
	return locks
}

// Len returns the number of keys in the store.
func (m *Memory) Len() int {
	return int(m.keys.Load())
}

// Sweep evicts the keys whose state is idle at now, locking one shard at a
// time, and returns how many it evicted.
func (m *Memory) Sweep(now time.Time) int {
	ns := now.UnixNano()
	return m.evict(func(e *entry) bool {
		return e.lockedUntil <= ns && e.held == 0 && e.state.Idle(ns, e.params)
	})
}

// Forget removes every key for which keep returns false, locking one shard
// at a time, and returns how many it removed. It is meant for a rule reload
// that drops rules. keep is called with a shard locked and must not use m.
func (m *Memory) Forget(keep func(key string) bool) int {
	return m.evict(func(e *entry) bool { return !keep(e.key) })
}

// evict removes the entries for which drop returns true, locking one
// shard at a time, and returns how many it removed.
func (m *Memory) evict(drop func(e *entry) bool) int {
	removed := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n := sh.evict(drop)
		m.keys.Add(-int64(n))
		m.pruneParams(uint32(i))
		sh.mu.Unlock()
		removed += n
	}
	return removed
}
