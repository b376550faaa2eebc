// Package topk finds the heaviest keys of a stream in bounded memory: the
// space-saving algorithm (Metwally, Agrawal and El Abbadi, "Efficient
// Computation of Frequent and Top-k Elements in Data Streams", ICDT 2005),
// with admitted and limited counts per key, and a window of two
// generations that rotate.
//
// Its counts are estimates with the algorithm's error bound: it must not be
// used to decide limits, only to show the heaviest keys.
package topk

import (
	"cmp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxKeyLen is the longest key a Sketch keeps, in bytes; a longer key is
// cut (at a UTF-8 boundary) and so shares its entry with every key that
// starts the same.
const MaxKeyLen = 128

// entry is one monitored key.
type entry struct {
	key string
	// count is an upper bound of the key's occurrences; err is how much
	// of count may belong to the keys it replaced, so that count-err is
	// a lower bound.
	count, err int64
	// admitted and limited are counted since the key entered: their sum
	// is count-err.
	admitted, limited int64
}

// Sketch is a space-saving summary of k entries: any key that makes more
// than N/k of the N occurrences it has seen is among them, and each
// entry's count exceeds the key's true count by at most its error, which
// is at most N/k. The zero value is not usable; create one with New. It
// is not safe for concurrent use.
type Sketch struct {
	k       int
	n       int64
	entries []entry
	index   map[string]int // key -> position in entries
}

// New returns a Sketch of k entries; k < 1 is taken as 1.
func New(k int) *Sketch {
	k = max(k, 1)
	return &Sketch{k: k, entries: make([]entry, 0, k), index: make(map[string]int, k)}
}

// Add counts one occurrence of key, admitted or limited. Add allocates
// only when key enters the sketch.
func (s *Sketch) Add(key string, admitted bool) {
	key = Truncate(key)
	s.n++
	i, ok := s.index[key]
	if !ok {
		if len(s.entries) < s.k {
			i = len(s.entries)
			s.entries = append(s.entries, entry{key: strings.Clone(key)})
		} else {
			// Replace the least counted key: the newcomer inherits its
			// count as error (the space-saving step).
			i = 0
			for j := 1; j < len(s.entries); j++ {
				if s.entries[j].count < s.entries[i].count {
					i = j
				}
			}
			old := s.entries[i]
			delete(s.index, old.key)
			s.entries[i] = entry{key: strings.Clone(key), count: old.count, err: old.count}
		}
		s.index[s.entries[i].key] = i
	}
	e := &s.entries[i]
	e.count++
	if admitted {
		e.admitted++
	} else {
		e.limited++
	}
}

// N returns how many occurrences the sketch has counted.
func (s *Sketch) N() int64 { return s.n }

// floor returns the most a key the sketch does not hold can have
// occurred: the least count when the sketch is full, else 0.
func (s *Sketch) floor() int64 {
	if len(s.entries) < s.k {
		return 0
	}
	m := s.entries[0].count
	for _, e := range s.entries[1:] {
		m = min(m, e.count)
	}
	return m
}

// Key is one heavy key as Top reports it.
type Key struct {
	Key string `json:"key"`
	// Count is an upper bound of the key's requests; Count-Error is a
	// lower bound.
	Count int64 `json:"count"`
	Error int64 `json:"error"`
	// Admitted and Limited are the requests counted while the key was
	// listed: lower bounds, whose sum is Count-Error.
	Admitted int64 `json:"admitted"`
	Limited  int64 `json:"limited"`
}

// Top returns the sketches' keys merged, heaviest first, at most k of
// them, and the occurrences they saw in all. A key missing from one
// sketch is given that sketch's floor, as both count and error, since it
// may have occurred that often there unseen.
func Top(k int, sketches ...*Sketch) ([]Key, int64) {
	var n int64
	merged := map[string]*Key{}
	for _, s := range sketches {
		if s == nil {
			continue
		}
		n += s.n
		for _, e := range s.entries {
			m := merged[e.key]
			if m == nil {
				m = &Key{Key: e.key}
				merged[e.key] = m
			}
			m.Count += e.count
			m.Error += e.err
			m.Admitted += e.admitted
			m.Limited += e.limited
		}
	}
	for _, s := range sketches {
		if s == nil {
			continue
		}
		if f := s.floor(); f > 0 {
			for key, m := range merged {
				if _, ok := s.index[key]; !ok {
					m.Count += f
					m.Error += f
				}
			}
		}
	}
	keys := make([]Key, 0, len(merged))
	for _, m := range merged {
		keys = append(keys, *m)
	}
	slices.SortFunc(keys, func(a, b Key) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(b.Count-b.Error, a.Count-a.Error), strings.Compare(a.Key, b.Key))
	})
	if len(keys) > k {
		keys = keys[:k]
	}
	return keys, n
}

// Truncate cuts key to MaxKeyLen bytes at a UTF-8 boundary.
func Truncate(key string) string {
	if len(key) <= MaxKeyLen {
		return key
	}
	i := MaxKeyLen
	for i > 0 && !utf8.RuneStart(key[i]) {
		i--
	}
	return key[:i]
}

// Window is two generations of a Sketch, the current one and the one
// before, rotated every period: it covers the last one to two periods.
// The zero value is not usable; create one with NewWindow. It is not safe
// for concurrent use.
type Window struct {
	k         int
	period    time.Duration
	start     time.Time // when cur began; zero before the first Add
	cur, prev *Sketch
}

// NewWindow returns a Window of k-entry sketches rotated every period.
func NewWindow(k int, period time.Duration) *Window {
	return &Window{k: max(k, 1), period: period, cur: New(k)}
}

// rotate brings the window to now.
func (w *Window) rotate(now time.Time) {
	if w.start.IsZero() {
		w.start = now.Truncate(w.period)
		return
	}
	switch age := now.Sub(w.start); {
	case age < w.period:
		return
	case age < 2*w.period && w.cur.n > 0:
		w.prev, w.cur = w.cur, New(w.k)
	case age < 2*w.period:
		w.prev = nil
	default:
		w.prev, w.cur = nil, New(w.k)
	}
	w.start = now.Truncate(w.period)
}

// Add counts one occurrence of key at now.
func (w *Window) Add(now time.Time, key string, admitted bool) {
	w.rotate(now)
	w.cur.Add(key, admitted)
}

// Top returns the window's heaviest keys at now, at most k, the
// occurrences counted, and when the window began (zero if it is empty).
func (w *Window) Top(now time.Time) ([]Key, int64, time.Time) {
	w.rotate(now)
	keys, n := Top(w.k, w.prev, w.cur)
	if n == 0 {
		return keys, 0, time.Time{}
	}
	from := w.start
	if w.prev != nil {
		from = from.Add(-w.period)
	}
	return keys, n, from
}
