package limit

import "sync"

// shard is one independently locked part of the key space: an
// open-addressing hash table with linear probing. Slot i holds ents[i],
// and tags[i] is the tag (tagOf) of its key's hash, or 0 when the slot is
// empty. Keys are found by the hash that chose their shard, so a decision
// hashes its key once; the tags are scanned before any key is compared.
//
// It is a table of its own rather than a map[string]*entry for memory: a
// gateway holding a million per-IP keys (bench/flood) measured 360 MiB of
// RSS with this table and 402 MiB with a map per shard (means of three
// runs). Per decision the table is also a few nanoseconds cheaper, which
// the handler does not show.
type shard struct {
	mu   sync.Mutex
	tags []uint32 // a power of two long, or empty
	ents []*entry // as long as tags
	n    int      // occupied slots
	// Shards are locked by different CPUs; the fields fill a cache line
	// exactly (TestShardFillsACacheLine).
}

// maxLoad is the fraction of a shard's slots that may be occupied before
// it doubles: with linear probing, a lookup scans on average 2.5 tags at
// 3/4 and 1.5 at 3/8, just after doubling.
const (
	maxLoadNum, maxLoadDen = 3, 4
	minSlots               = 8
)

// tagOf returns the tag of a key's hash h: its high 32 bits, with the top
// one set so that no tag is 0. The low bits of h pick the shard and the
// low bits of the tag the home slot, so the two are independent.
func tagOf(h uint64) uint32 {
	return uint32(h>>32) | 1<<31
}

// find returns the entry of key, whose tag is tag, and its slot; or nil and
// the empty slot where the key would go. The shard is locked.
func (sh *shard) find(key string, tag uint32) (*entry, int) {
	tags := sh.tags
	if len(tags) == 0 {
		return nil, -1
	}
	ents := sh.ents[:len(tags)]
	mask := len(tags) - 1
	for i := int(tag) & mask; ; i = (i + 1) & mask {
		switch tags[i] {
		case tag:
			if e := ents[i]; e.key == key {
				return e, i
			}
		case 0:
			return nil, i
		}
	}
}

// insert puts e, whose key has tag tag and is not in the table, in slot i,
// the empty slot that find returned. The shard is locked.
func (sh *shard) insert(i int, tag uint32, e *entry) {
	if (sh.n+1)*maxLoadDen > len(sh.tags)*maxLoadNum {
		sh.resize(max(2*len(sh.tags), minSlots))
		_, i = sh.find(e.key, tag)
	}
	sh.tags[i], sh.ents[i] = tag, e
	sh.n++
}

// resize moves the entries to a table of size slots, a power of two that
// keeps the load at most maxLoad. The shard is locked.
func (sh *shard) resize(size int) {
	tags, ents := make([]uint32, size), make([]*entry, size)
	mask := size - 1
	for j, t := range sh.tags {
		if t == 0 {
			continue
		}
		i := int(t) & mask
		for tags[i] != 0 {
			i = (i + 1) & mask
		}
		tags[i], ents[i] = t, sh.ents[j]
	}
	sh.tags, sh.ents = tags, ents
}

// remove empties slot i and moves later entries of its cluster back so
// that every entry stays reachable from its home slot without tombstones
// (Knuth's algorithm R). Only slots after i in the cluster change. The
// shard is locked.
func (sh *shard) remove(i int) {
	tags, ents := sh.tags, sh.ents[:len(sh.tags)]
	mask := len(tags) - 1
	for j := i; ; {
		j = (j + 1) & mask
		t := tags[j]
		if t == 0 {
			break
		}
		// The entry at j may fill the hole at i unless its home slot
		// lies cyclically in (i, j].
		if home := int(t) & mask; (j-home)&mask >= (j-i)&mask {
			tags[i], ents[i] = t, ents[j]
			i = j
		}
	}
	tags[i], ents[i] = 0, nil
	sh.n--
}

// evict removes the entries for which drop returns true and returns how
// many it removed, shrinking the table when it is mostly empty so that
// the memory of a flood of keys is returned once they are swept. The
// shard is locked.
func (sh *shard) evict(drop func(e *entry) bool) int {
	size := len(sh.tags)
	if sh.n == 0 {
		return 0
	}
	// Start after an empty slot: no cluster spans the start, so the
	// entries that remove moves back are all still ahead, and each entry
	// is seen once.
	start := 0
	for sh.tags[start] != 0 {
		start++
	}
	removed := 0
	for k := 1; k <= size; {
		i := (start + k) & (size - 1)
		if sh.tags[i] != 0 && drop(sh.ents[i]) {
			sh.remove(i)
			removed++
			continue // slot i may hold a moved entry now
		}
		k++
	}
	if sh.n == 0 {
		sh.tags, sh.ents = nil, nil
	} else if size > minSlots && sh.n*8 < size {
		sh.resize(max(size/4, minSlots))
	}
	return removed
}
