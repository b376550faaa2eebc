package limittest

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

// RepeatedKey checks that a store counts a counter named twice in one
// call twice, for every algorithm: a limit of 20 admits ten calls that
// name its key twice and refuses the eleventh, with the Remaining of
// both requests counting both units; and that a repeated key in a call
// that is denied by another limit counts nothing. newStore returns a
// fresh store that decides at now.
func RepeatedKey(t *testing.T, newStore func(t *testing.T, now time.Time) limit.Store) {
	t.Helper()
	for _, alg := range limit.Algorithms() {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			p := limit.Params{Algorithm: alg, Limit: 20, Window: time.Hour}
			if alg == "sliding_window" {
				p.Precision = 10
			}
			closed := limit.Params{Algorithm: alg, Limit: 0, Window: time.Hour}
			if alg == "sliding_window" {
				closed.Precision = 10
			}
			now := time.Unix(1_735_689_600, 0)
			s := newStore(t, now)
			key := "app|/twice|" + alg
			twice := func() (bool, []limit.Result) {
				t.Helper()
				reqs := []limit.Request{{Key: key, Params: &p}, {Key: key, Params: &p}}
				res := make([]limit.Result, 2)
				ok, err := s.Allow(context.Background(), now, reqs, res)
				if err != nil {
					t.Fatalf("Allow: %v", err)
				}
				return ok, res
			}
			// Denied by another limit: nothing counted.
			reqs := []limit.Request{{Key: key, Params: &p}, {Key: key, Params: &p}, {Key: "app|/closed|" + alg, Params: &closed}}
			if ok, err := s.Allow(context.Background(), now, reqs, make([]limit.Result, 3)); err != nil || ok {
				t.Fatalf("call with a closed limit: got %v, %v, want denied", ok, err)
			}
			for i := range 10 {
				ok, res := twice()
				want := int64(20 - 2*(i+1))
				if !ok || res[0].Remaining != want || res[1].Remaining != want {
					t.Fatalf("call %d naming the key twice: got %v %+v, want admitted with %d left on both", i+1, ok, res, want)
				}
			}
			if ok, res := twice(); ok {
				t.Fatalf("call 11 naming the key twice: admitted %+v, want denied (20 counted)", res)
			}
			one := make([]limit.Result, 1)
			if ok, err := s.Allow(context.Background(), now, []limit.Request{{Key: key, Params: &p}}, one); err != nil || ok {
				t.Fatalf("a single request after 20 units: got %v %+v, %v, want denied", ok, one[0], err)
			}
			// Two limits on one counter (an override that shares its
			// descriptor's counter): both units count, on the stricter.
			tight := p
			tight.Limit = 10
			two := []limit.Request{{Key: key + "|two", Params: &p}, {Key: key + "|two", Params: &tight}}
			for i := range 5 {
				res := make([]limit.Result, 2)
				ok, err := s.Allow(context.Background(), now, two, res)
				if err != nil || !ok || res[1].Remaining != int64(10-2*(i+1)) || res[0].Remaining != int64(20-2*(i+1)) || res[0].Limit != 20 {
					t.Fatalf("call %d naming one counter under limits 20 and 10: got %v %+v, %v, want admitted with %d and %d left",
						i+1, ok, res, err, 20-2*(i+1), 10-2*(i+1))
				}
			}
			if ok, err := s.Allow(context.Background(), now, two, make([]limit.Result, 2)); err != nil || ok {
				t.Fatalf("call 6 under limits 20 and 10: got %v, %v, want denied (10 counted)", ok, err)
			}
		})
	}
}
