package proxy

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
)

// downStore is a store, and slots, that always fail.
type downStore struct{}

func (downStore) Allow(context.Context, time.Time, []limit.Request, []limit.Result) (bool, error) {
	return false, errors.New("store down")
}

func (downStore) Acquire(context.Context, []limit.SlotRequest) (limit.Permit, int, error) {
	return nil, -1, errors.New("slots down")
}

// TestFailover checks the one place where --fail-mode applies: what
// allow and acquire return, in each mode, when the store answers, when
// it fails, and under local when the memory store fails too; and that a
// local decision uses the local share of each limit without changing the
// requests the handler keeps (a request decided again after waiting for
// room asks the store with its own limits).
func TestFailover(t *testing.T) {
	t.Parallel()
	cl := &ruleset.Limit{
		Params: limit.Params{Algorithm: "fixed_window", Limit: 10, Window: time.Minute},
		Local:  limit.Params{Algorithm: "fixed_window", Limit: 1, Window: time.Minute},
		Conc:   4, ConcLocal: 1,
	}
	tests := []struct {
		name       string
		mode       FailMode
		down       bool // the store and the slots fail
		localDown  bool // so do the local ones
		wantRate   verdict
		wantSlots  verdict
		wantLimit  int64 // the Limit of the first result, for the decided ones
		wantSecond bool  // a second request is admitted (rate) and gets a slot
	}{
		{name: "open, store up", mode: FailOpen, wantRate: storeDecided, wantSlots: storeDecided, wantLimit: 10, wantSecond: true},
		{name: "open, store down", mode: FailOpen, down: true, wantRate: failedOpen, wantSlots: failedOpen},
		{name: "closed, store down", mode: FailClosed, down: true, wantRate: failedClosed, wantSlots: failedClosed},
		{name: "local, store up", mode: FailLocal, wantRate: storeDecided, wantSlots: storeDecided, wantLimit: 10, wantSecond: true},
		{name: "local, store down", mode: FailLocal, down: true, wantRate: localDecided, wantSlots: localDecided, wantLimit: 1},
		{name: "local, both down", mode: FailLocal, down: true, localDown: true, wantRate: failedOpen, wantSlots: failedOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			newMem := func() limit.Store {
				m, err := limit.NewMemory(limit.MemoryConfig{})
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			f := &failover{failMode: tt.mode, logger: slog.New(slog.DiscardHandler),
				store: newMem(), slots: limit.NewMemorySlots(), local: newMem(), localSlots: limit.NewMemorySlots()}
			if tt.down {
				f.store, f.slots = downStore{}, downStore{}
			}
			if tt.localDown {
				f.local, f.localSlots = downStore{}, downStore{}
			}
			lims := []*ruleset.Limit{cl}
			for i := range 2 {
				reqs := []limit.Request{{Key: "app-1|/x", Params: &cl.Params}}
				res := make([]limit.Result, 1)
				allowed, v := f.allow(context.Background(), t0, reqs, res, lims)
				if reqs[0].Params != &cl.Params {
					t.Errorf("request %d: allow changed the request's params", i+1)
				}
				if i == 0 {
					if want := v != failedClosed; v != tt.wantRate || allowed != want {
						t.Errorf("allow: got %v %v, want %v %v", allowed, v, tt.wantRate, want)
					}
					if (v == storeDecided || v == localDecided) && res[0].Limit != tt.wantLimit {
						t.Errorf("allow: result's limit %d, want %d", res[0].Limit, tt.wantLimit)
					}
					continue
				}
				if want := tt.wantSecond || v == failedOpen; allowed != want {
					t.Errorf("second request: allowed %v, want %v", allowed, want)
				}
			}
			var leases []limit.Permit
			for i := range 2 {
				reqs := []limit.SlotRequest{{Key: "app-1|/x", Limit: cl.Conc}}
				lease, _, v := f.acquire(context.Background(), reqs, lims)
				if reqs[0].Limit != cl.Conc {
					t.Errorf("slot %d: acquire changed the request's limit", i+1)
				}
				if v != tt.wantSlots {
					t.Errorf("slot %d: got %v, want %v", i+1, v, tt.wantSlots)
				}
				if decided := v == storeDecided || v == localDecided; decided {
					if want := i == 0 || tt.wantSecond; (lease != nil) != want {
						t.Errorf("slot %d: got a lease %v, want %v", i+1, lease != nil, want)
					}
				} else if lease != nil {
					t.Errorf("slot %d: a lease when the store failed", i+1)
				}
				if lease != nil {
					leases = append(leases, lease)
				}
			}
			for _, l := range leases {
				l.Release()
			}
		})
	}
}
