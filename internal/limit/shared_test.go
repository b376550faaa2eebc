package limit

import (
	"fmt"
	"testing"
)

func TestCallerTag(t *testing.T) {
	t.Parallel()
	ip := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255) }
	seen := map[string]int{}
	for i := range 64 * 100 {
		tag := CallerTag(ip(i))
		if len(tag) != 3 || tag[0] != '~' || tag[1] < '0' || tag[1] > '9' || tag[2] < '0' || tag[2] > '9' {
			t.Fatalf("CallerTag(%s) = %q: not a caller tag", ip(i), tag)
		}
		seen[tag]++
	}
	if len(seen) != CallerBuckets {
		t.Errorf("6400 callers fell in %d buckets, want all %d", len(seen), CallerBuckets)
	}
	for tag, n := range seen {
		if n < 50 || n > 150 {
			t.Errorf("bucket %s holds %d of 6400 callers, want about 100", tag, n)
		}
	}
	// Every gateway must pick the same bucket: the hash is fixed.
	if got, want := CallerTag("203.0.113.7"), CallerTag("203.0.113.7"); got != want || got != "~"+got[1:] {
		t.Errorf("CallerTag is not stable: %q, %q", got, want)
	}
}
