package limit

import "context"

// Resetter is a Store that can clear a counter, as if no request had
// been counted against it: the admin port's POST /usage/reset.
type Resetter interface {
	// Reset clears the counter key with tag (as Request.Key and
	// Request.Tag name it), and its lockout. It reports whether there was
	// one.
	Reset(ctx context.Context, key, tag string) (bool, error)
}

var _ Resetter = (*Memory)(nil)

// Reset clears the counter key (the memory store ignores tag).
func (m *Memory) Reset(_ context.Context, key, _ string) (bool, error) {
	h := m.hash(key)
	sh := &m.shards[m.shardOf(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, slot := sh.find(key, tagOf(h))
	if e == nil {
		return false, nil
	}
	sh.remove(slot)
	m.keys.Add(-1)
	return true, nil
}
