package limit

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"strings"
	"sync"
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
	// Overflow key is counted against that instead (DESIGN §6). New keys
	// without one are created anyway. It is a soft cap: callers racing
	// just below it may each add a key. 0 means DefaultMaxKeys
	// (1,000,000).
	MaxKeys int
}

// Memory is the in-process Store (DESIGN §6): a map from key to algorithm
// state, split into shards that are locked separately, so that decisions
// on different keys rarely contend and none takes a global lock.
//
// Keys are hashed with a per-process random seed: callers choose the keys
// (client IPs), so a fixed hash would let them pile every key into one
// shard.
//
// Idle keys stay until Sweep (or SweepEvery) evicts them.
//
// Create a Memory with NewMemory; the zero value is not usable. A Memory is
// safe for concurrent use.
type Memory struct {
	seed    maphash.Seed
	mask    uint64
	maxKeys int64
	keys    atomic.Int64
	shards  []shard
}

var _ Store = (*Memory)(nil)

type shard struct {
	mu sync.Mutex
	m  map[string]*entry
	// params interns the Params of the shard's entries: a rule's Params
	// are shared by all of its keys (a million client IPs), so an entry
	// points to one copy rather than holding its own. It holds every
	// Params a key of the shard was created or reshaped with, a few per
	// rule edit. It is per shard so that creating a key takes no lock
	// but its shard's.
	params map[Params]*Params
	// Shards are locked by different CPUs; keep each on its own cache
	// line (a Mutex and two map pointers are 24 bytes).
	_ [64 - 24]byte
}

// intern returns the shard's copy of p. The shard is locked.
func (sh *shard) intern(p *Params) *Params {
	if q, ok := sh.params[*p]; ok {
		return q
	}
	if sh.params == nil {
		sh.params = map[Params]*Params{}
	}
	q := new(Params)
	*q = *p
	sh.params[*p] = q
	return q
}

// entry is the state of one key, guarded by its shard's mutex.
type entry struct {
	state State
	// params are the Params the state was last used with, interned:
	// Identity tells whether a reloaded rule can keep the state, and
	// Sweep asks Idle with them. They are never modified.
	params *Params
	// lockedUntil is the end of the key's lockout (Params.Lock), in
	// nanoseconds since the Unix epoch; the key is locked while now is
	// before it. Lockouts live here rather than in the States so that
	// every algorithm has them.
	lockedUntil int64
}

// lockout makes r, the Result of a locked key, a denial that lasts at
// least until the lockout's end: left is the time until then.
func lockout(r Result, left time.Duration) Result {
	return Result{
		Limit:      r.Limit,
		Reset:      max(r.Reset, left),
		RetryAfter: max(r.RetryAfter, left),
	}
}

// NewMemory returns an empty Memory store configured by cfg.
func NewMemory(cfg MemoryConfig) (*Memory, error) {
	if cfg.Shards < 0 || cfg.Shards > maxShards {
		return nil, fmt.Errorf("shards %d is outside 1..%d (0 for the default %d)", cfg.Shards, maxShards, DefaultShards)
	}
	if cfg.MaxKeys < 0 {
		return nil, fmt.Errorf("max keys %d is negative (0 for the default %d)", cfg.MaxKeys, DefaultMaxKeys)
	}
	shards := cfg.Shards
	if shards == 0 {
		shards = DefaultShards
	}
	shards = 1 << bits.Len(uint(shards-1)) // round up to a power of two
	maxKeys := cfg.MaxKeys
	if maxKeys == 0 {
		maxKeys = DefaultMaxKeys
	}
	m := &Memory{
		seed:    maphash.MakeSeed(),
		mask:    uint64(shards - 1),
		maxKeys: int64(maxKeys),
		shards:  make([]shard, shards),
	}
	for i := range m.shards {
		m.shards[i].m = make(map[string]*entry)
	}
	return m, nil
}

// inline is the number of requests per call that Allow handles without
// allocating. The proxy sends at most two (the app total and one rule).
const inline = 4

// Allow implements Store. It decides reqs at now and counts the request
// against every limit that admitted it if no enforced limit denied it.
// When it reports false, nothing is counted, and the Remaining of each
// Result that admitted is that of the uncounted state (its Reset is still
// the one it would have had if counted, an upper bound).
//
// Lockouts (seed 002): when a limit with Params.Lock > 0 that is not a
// shadow denies, its key is locked for Lock from now, and every request
// on that key is denied until then, with Remaining 0 and a RetryAfter of
// at least the time left. A request denied while locked does not extend
// the lockout, and RetryAfter is also never less than the algorithm's
// own: a client that waits it out is admitted. A lockout concerns its key
// only: the other limits of the request are counted or not as usual.
//
// The keys of reqs (after overflow) must be distinct. Allow returns an
// error wrapping ErrUnknownAlgorithm for Params naming an unregistered
// algorithm, or the Validate error of Params used to create or reshape a
// key's state. ctx is not used: a decision is a few map lookups.
func (m *Memory) Allow(_ context.Context, now time.Time, reqs []Request, res []Result) (bool, error) {
	n := len(reqs)
	if len(res) < n {
		return false, fmt.Errorf("limit: %d results for %d requests", len(res), n)
	}
	for i := range reqs {
		if reqs[i].Params == nil {
			return false, fmt.Errorf("limit: request for %q has no params", reqs[i].Key)
		}
	}
	// The cap is checked once, before locking: an Overflow shard is
	// locked only when it may be needed. Callers racing below the cap may
	// each add a key, so MaxKeys is exceeded by at most the number of
	// concurrent calls until the next Sweep.
	atCap := m.keys.Load() >= m.maxKeys
	ns := now.UnixNano()
	if n == 1 && !(atCap && reqs[0].Overflow != "") {
		return m.allowOne(ns, &reqs[0], &res[0])
	}

	var (
		entBuf  [inline]*entry
		keyBuf  [inline]uint32 // shard of Key
		ovfBuf  [inline]int32  // shard of Overflow, -1 when not locked
		lockBuf [2 * inline]uint32

		ents     []*entry
		keyShard []uint32
		ovfShard []int32
		locks    []uint32 // shards to lock, ascending
	)
	if n <= inline {
		ents, keyShard, ovfShard, locks = entBuf[:n], keyBuf[:n], ovfBuf[:n], lockBuf[:0]
	} else {
		ents = make([]*entry, n)
		keyShard, ovfShard = make([]uint32, n), make([]int32, n)
		locks = make([]uint32, 0, 2*n)
	}
	for i := range reqs {
		r := &reqs[i]
		keyShard[i] = m.shardOf(r.Key)
		locks = insertSorted(locks, keyShard[i])
		ovfShard[i] = -1
		if atCap && r.Overflow != "" {
			s := m.shardOf(r.Overflow)
			ovfShard[i] = int32(s)
			locks = insertSorted(locks, s)
		}
	}

	// Ascending order: two calls sharing shards cannot deadlock.
	for _, s := range locks {
		m.shards[s].mu.Lock()
	}
	defer m.unlock(locks)

	for i := range reqs {
		r := &reqs[i]
		e, err := m.entryFor(r, keyShard[i], ovfShard[i])
		if err != nil {
			return false, err
		}
		ents[i] = e
		res[i] = e.decide(ns, r.Params)
	}
	allowed := true
	for i := range reqs {
		if !res[i].Allowed && !reqs[i].Shadow {
			allowed = false
			break
		}
	}
	for i := range reqs {
		ents[i].settle(ns, &reqs[i], &res[i], allowed)
	}
	return allowed, nil
}

// allowOne is Allow for a single request that needs no overflow shard:
// the common case, with one lock and no bookkeeping.
func (m *Memory) allowOne(ns int64, r *Request, res *Result) (bool, error) {
	s := m.shardOf(r.Key)
	sh := &m.shards[s]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, err := m.entryFor(r, s, -1)
	if err != nil {
		return false, err
	}
	*res = e.decide(ns, r.Params)
	allowed := res.Allowed || r.Shadow
	e.settle(ns, r, res, allowed)
	return allowed, nil
}

// decide is the entry's Result for one more request at ns, lockout
// included. Its shard is locked.
func (e *entry) decide(ns int64, p *Params) Result {
	r := e.state.Decide(ns, p)
	if e.lockedUntil > ns {
		r = lockout(r, time.Duration(e.lockedUntil-ns))
	}
	return r
}

// settle applies a decision to the entry: it counts the request when the
// request as a whole was admitted (allowed) and this limit admitted it,
// and starts a lockout when this enforced limit denied it. Its shard is
// locked.
func (e *entry) settle(ns int64, r *Request, res *Result, allowed bool) {
	if !res.Allowed {
		if p := r.Params; p.Lock > 0 && !r.Shadow && e.lockedUntil <= ns {
			e.lockedUntil = ns + int64(p.Lock)
			*res = lockout(*res, p.Lock)
		}
		return
	}
	if allowed {
		e.state.Commit(ns, r.Params)
	} else if res.Remaining >= 0 {
		res.Remaining++ // decided as if counted; it was not
	}
}

// entryFor returns the entry that r is counted against, creating it (under
// the Overflow key when ovf ≥ 0 and the store is full) or resetting its
// state if r.Params no longer fit it. The shards involved are locked.
func (m *Memory) entryFor(r *Request, key uint32, ovf int32) (*entry, error) {
	sh := &m.shards[key]
	e := sh.m[r.Key]
	if e == nil {
		k := r.Key
		if ovf >= 0 && m.keys.Load() >= m.maxKeys {
			sh, k = &m.shards[ovf], r.Overflow
			e = sh.m[k]
		}
		if e == nil {
			a, err := algorithmFor(k, r.Params)
			if err != nil {
				return nil, err
			}
			e = &entry{state: a.NewState(r.Params), params: sh.intern(r.Params)}
			// Clone: the caller's key may share memory with a larger
			// string (a request header) that the map would otherwise keep.
			sh.m[strings.Clone(k)] = e
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
	e.params = sh.intern(r.Params)
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

func (m *Memory) shardOf(key string) uint32 {
	return uint32(maphash.String(m.seed, key) & m.mask)
}

// insertSorted adds s to the ascending set locks unless it is there.
func insertSorted(locks []uint32, s uint32) []uint32 {
	i := len(locks)
	for i > 0 && locks[i-1] > s {
		i--
	}
	if i > 0 && locks[i-1] == s {
		return locks
	}
	locks = append(locks, 0)
	copy(locks[i+1:], locks[i:])
	locks[i] = s
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
	evicted := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n := 0
		for k, e := range sh.m {
			if e.lockedUntil <= ns && e.state.Idle(ns, e.params) {
				delete(sh.m, k)
				n++
			}
		}
		m.keys.Add(-int64(n))
		sh.mu.Unlock()
		evicted += n
	}
	return evicted
}

// Forget removes every key for which keep returns false, locking one shard
// at a time, and returns how many it removed. It is meant for a rule reload
// that drops rules. keep is called with a shard locked and must not use m.
func (m *Memory) Forget(keep func(key string) bool) int {
	removed := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n := 0
		for k := range sh.m {
			if !keep(k) {
				delete(sh.m, k)
				n++
			}
		}
		m.keys.Add(-int64(n))
		sh.mu.Unlock()
		removed += n
	}
	return removed
}

// SweepEvery calls Sweep with the time now returns every interval until
// ctx is done. now is the clock (time.Now in production); nil means
// time.Now. It panics if every is not positive, like time.NewTicker.
func (m *Memory) SweepEvery(ctx context.Context, every time.Duration, now func() time.Time) {
	if every <= 0 {
		panic(errors.New("limit: non-positive interval for SweepEvery"))
	}
	if now == nil {
		now = time.Now
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.Sweep(now())
		}
	}
}
