package limittest

import (
	"context"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// SlotStep is one step of a slots table: acquire reqs (wantFull the index
// of the refusing request, -1 when taken), or release the permit of an
// earlier step.
type SlotStep struct {
	Name     string
	Reqs     []limit.SlotRequest
	WantFull int
	Release  int // the step whose permit to release; -1 for none
}

// RunSlotSteps runs steps against s and reports the failing step.
func RunSlotSteps(t *testing.T, s limit.Slots, steps []SlotStep) []limit.Permit {
	t.Helper()
	permits := make([]limit.Permit, len(steps))
	for i, st := range steps {
		if st.Release >= 0 {
			permits[st.Release].Release()
			continue
		}
		l, full, err := s.Acquire(context.Background(), st.Reqs)
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, st.Name, err)
		}
		if full != st.WantFull || (l == nil) != (st.WantFull >= 0) {
			t.Fatalf("step %d (%s): got full %d permit %v, want full %d", i, st.Name, full, l != nil, st.WantFull)
		}
		permits[i] = l
	}
	return permits
}

// SlotTable is the table both stores run: a rule of 2 in flight beside
// an app total of 3, per key.
func SlotTable() []SlotStep {
	total := limit.SlotRequest{Key: "app-1|", Limit: 3}
	rule := limit.SlotRequest{Key: "app-1|/up", Limit: 2}
	other := limit.SlotRequest{Key: "app-1|/down", Limit: 2}
	both := []limit.SlotRequest{total, rule}
	return []SlotStep{
		{Name: "first", Reqs: both, WantFull: -1, Release: -1},
		{Name: "second", Reqs: both, WantFull: -1, Release: -1},
		{Name: "third: the rule is full", Reqs: both, WantFull: 1, Release: -1},
		{Name: "another rule: the total has room", Reqs: []limit.SlotRequest{total, other}, WantFull: -1, Release: -1},
		{Name: "the total is full", Reqs: []limit.SlotRequest{total, other}, WantFull: 0, Release: -1},
		{Name: "release the first", Release: 0},
		{Name: "a slot again", Reqs: both, WantFull: -1, Release: -1},
		{Name: "released twice counts once", Release: 0},
		{Name: "full again", Reqs: both, WantFull: 0, Release: -1},
		{Name: "release the rest", Release: 1},
		{Name: "release", Release: 3},
		{Name: "release", Release: 6},
	}
}
