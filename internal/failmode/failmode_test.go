package failmode

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/limit"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// downStore is a store, and slots, that always fail.
type downStore struct{}

func (downStore) Allow(context.Context, time.Time, []limit.Request, []limit.Result) (bool, error) {
	return false, errors.New("store down")
}

func (downStore) Acquire(context.Context, []limit.SlotRequest) (limit.Permit, int, error) {
	return nil, -1, errors.New("slots down")
}

func newMem(t *testing.T) *limit.Memory {
	t.Helper()
	m, err := limit.NewMemory(limit.MemoryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFailover checks the one place where --fail-mode applies: what
// Allow and Acquire return, in each mode, when the store answers, when
// it fails, and under Local when the local store fails too; and that a
// local decision uses the local share of each limit without changing the
// requests the caller keeps (a request decided again after waiting for
// room asks the store with its own limits).
func TestFailover(t *testing.T) {
	t.Parallel()
	fleet := limit.Params{Algorithm: "fixed_window", Limit: 10, Window: time.Minute}
	localP := limit.Params{Algorithm: "fixed_window", Limit: 1, Window: time.Minute}
	const conc, concLocal = 4, 1
	tests := []struct {
		name       string
		mode       Mode
		down       bool // the store and the slots fail
		localDown  bool // so do the local ones
		wantRate   Verdict
		wantSlots  Verdict
		wantLimit  int64 // the Limit of the first result, for the decided ones
		wantSecond bool  // a second request is admitted (rate) and gets a slot
	}{
		{name: "open, store up", mode: Open, wantRate: StoreDecided, wantSlots: StoreDecided, wantLimit: 10, wantSecond: true},
		{name: "open, store down", mode: Open, down: true, wantRate: FailedOpen, wantSlots: FailedOpen},
		{name: "closed, store down", mode: Closed, down: true, wantRate: FailedClosed, wantSlots: FailedClosed},
		{name: "local, store up", mode: Local, wantRate: StoreDecided, wantSlots: StoreDecided, wantLimit: 10, wantSecond: true},
		{name: "local, store down", mode: Local, down: true, wantRate: LocalDecided, wantSlots: LocalDecided, wantLimit: 1},
		{name: "local, both down", mode: Local, down: true, localDown: true, wantRate: FailedOpen, wantSlots: FailedOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Mode: tt.mode, Logger: slog.New(slog.DiscardHandler),
				Store: newMem(t), Slots: limit.NewMemorySlots(), Local: newMem(t), LocalSlots: limit.NewMemorySlots()}
			if tt.down {
				cfg.Store, cfg.Slots = downStore{}, downStore{}
			}
			if tt.localDown {
				cfg.Local, cfg.LocalSlots = downStore{}, downStore{}
			}
			f, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			localParams := func(int) *limit.Params { return &localP }
			for i := range 2 {
				reqs := []limit.Request{{Key: "app-1|/x", Params: &fleet}}
				res := make([]limit.Result, 1)
				allowed, v, _ := f.Allow(context.Background(), t0, reqs, res, localParams)
				if reqs[0].Params != &fleet {
					t.Errorf("request %d: Allow changed the request's params", i+1)
				}
				if i == 0 {
					if want := v != FailedClosed; v != tt.wantRate || allowed != want {
						t.Errorf("Allow: got %v %v, want %v %v", allowed, v, tt.wantRate, want)
					}
					if (v == StoreDecided || v == LocalDecided) && res[0].Limit != tt.wantLimit {
						t.Errorf("Allow: result's limit %d, want %d", res[0].Limit, tt.wantLimit)
					}
					continue
				}
				if want := tt.wantSecond || v == FailedOpen; allowed != want {
					t.Errorf("second request: allowed %v, want %v", allowed, want)
				}
			}
			var leases []limit.Permit
			for i := range 2 {
				reqs := []limit.SlotRequest{{Key: "app-1|/x", Limit: conc}}
				lease, _, v := f.Acquire(context.Background(), reqs, func(int) int64 { return concLocal })
				if reqs[0].Limit != conc {
					t.Errorf("slot %d: Acquire changed the request's limit", i+1)
				}
				if v != tt.wantSlots {
					t.Errorf("slot %d: got %v, want %v", i+1, v, tt.wantSlots)
				}
				if decided := v == StoreDecided || v == LocalDecided; decided {
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

// lateError is a store error that, like the Redis store's, wants to know
// when the request it failed was admitted locally (limit.AdmittedLocally),
// so that the store counts it once.
type lateError struct{ admitted *int }

func (e lateError) Error() string { return "call timed out" }
func (e lateError) AdmittedLocally() limit.Alone {
	*e.admitted++
	return &journal{}
}

// journal records what follows a local admission (limit.Alone).
type journal struct{ reqs []limit.Request }

func (j *journal) Follow(_ time.Time, reqs []limit.Request) { j.reqs = append(j.reqs, reqs...) }

// lateStore fails every call with a lateError.
type lateStore struct{ admitted int }

func (s *lateStore) Allow(context.Context, time.Time, []limit.Request, []limit.Result) (bool, error) {
	return false, lateError{&s.admitted}
}

// TestAllowWritesBack checks that Allow tells the failed store of each
// request it admits locally, and of none it denies or does not decide:
// the hook by which a store that did not answer in time counts the
// request once.
func TestAllowWritesBack(t *testing.T) {
	t.Parallel()
	p := limit.Params{Algorithm: "fixed_window", Limit: 3, Window: time.Minute}
	for _, tt := range []struct {
		name      string
		mode      Mode
		calls     int
		wantTold  int
		localDown bool
	}{
		{name: "local admits 3 of 5", mode: Local, calls: 5, wantTold: 3},
		{name: "local store down too", mode: Local, calls: 5, localDown: true},
		{name: "open", mode: Open, calls: 5},
		{name: "closed", mode: Closed, calls: 5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := &lateStore{}
			cfg := Config{Mode: tt.mode, Store: st, Local: newMem(t), Logger: slog.New(slog.DiscardHandler)}
			if tt.localDown {
				cfg.Local = downStore{}
			}
			f, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for range tt.calls {
				reqs := []limit.Request{{Key: "a|/x", Params: &p}}
				allowed, v, alone := f.Allow(context.Background(), t0, reqs, make([]limit.Result, 1), func(int) *limit.Params { return &p })
				if (alone != nil) != (allowed && v == LocalDecided) {
					t.Errorf("Allow: %v, %v with journal %v: want a journal exactly for a local admission", allowed, v, alone)
				}
			}
			if st.admitted != tt.wantTold {
				t.Errorf("store told of %d local admissions, want %d", st.admitted, tt.wantTold)
			}
		})
	}
}

// TestCharge checks that charges go to the store that decided.
func TestCharge(t *testing.T) {
	t.Parallel()
	fleet := limit.Params{Algorithm: "fixed_window", Limit: 10, Window: time.Minute}
	localP := limit.Params{Algorithm: "fixed_window", Limit: 2, Window: time.Minute}
	store, local := newMem(t), newMem(t)
	f, err := New(Config{Mode: Local, Store: store, Local: local, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lp := func(int) *limit.Params { return &localP }
	for _, tt := range []struct {
		name string
		v    Verdict
		want limit.Store // where the charge lands
	}{
		{name: "store decided", v: StoreDecided, want: store},
		{name: "local decided", v: LocalDecided, want: local},
	} {
		key := "a|/" + tt.name
		reqs := []limit.Request{{Key: key, Params: &fleet}}
		res := make([]limit.Result, 1)
		j := &journal{}
		if err := f.Charge(context.Background(), t0, tt.v, j, reqs, res, lp); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		// The fleet hears of a charge decided alone, with its own params.
		if tt.v == LocalDecided && (len(j.reqs) != 1 || j.reqs[0].Params != &fleet) {
			t.Errorf("%s: journal got %+v, want the charge with the fleet's params", tt.name, j.reqs)
		}
		if tt.v != LocalDecided && len(j.reqs) != 0 {
			t.Errorf("%s: journal got %+v, want nothing: the store counted it", tt.name, j.reqs)
		}
		wantRemaining := fleet.Limit - 1
		if tt.v == LocalDecided {
			wantRemaining = localP.Limit - 1
		}
		if res[0].Remaining != wantRemaining {
			t.Errorf("%s: remaining %d, want %d", tt.name, res[0].Remaining, wantRemaining)
		}
		var found bool
		tt.want.(*limit.Memory).Forget(func(k string) bool { found = found || k == key; return true })
		if !found {
			t.Errorf("%s: the charge is not on the store that decided", tt.name)
		}
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		cfg  Config
	}{
		{name: "no store", cfg: Config{}},
		{name: "local without a local store", cfg: Config{Mode: Local, Store: downStore{}}},
		{name: "unknown mode", cfg: Config{Mode: Local + 1, Store: downStore{}}},
	} {
		if _, err := New(tt.cfg); err == nil {
			t.Errorf("%s: New accepted it", tt.name)
		}
	}
}

func TestModeFlag(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{in: "open", want: Open},
		{in: "closed", want: Closed},
		{in: "local", want: Local},
		{in: "Local", want: Open, wantErr: true},
	} {
		var m Mode
		err := m.Set(tt.in)
		if (err != nil) != tt.wantErr || m != tt.want {
			t.Errorf("Set(%q): got %v %v, want %v (error %v)", tt.in, m, err, tt.want, tt.wantErr)
		}
		if err == nil && m.String() != tt.in {
			t.Errorf("String of %q: got %q", tt.in, m.String())
		}
	}
}

// TestLocalDecisionsDoNotWait: under Local, a request over its limit's
// local share that may wait for room (Wait) is refused at once when the
// store fails, as without a wait, not admitted at an instant ahead: the
// fleet would count that admission when Redis hears of it, in another
// window than the one it is forwarded in. The store, when it answers,
// still reserves room ahead.
func TestLocalDecisionsDoNotWait(t *testing.T) {
	t.Parallel()
	fleet := limit.Params{Algorithm: "fixed_window", Limit: 10, Window: time.Minute}
	localP := limit.Params{Algorithm: "fixed_window", Limit: 1, Window: time.Minute}
	for _, down := range []bool{true, false} {
		cfg := Config{Mode: Local, Logger: slog.New(slog.DiscardHandler), Store: newMem(t), Local: newMem(t)}
		if down {
			cfg.Store = downStore{}
		}
		f, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		localParams := func(int) *limit.Params { return &localP }
		p := &fleet
		if !down {
			p = &localP // the store's own limit of 1, to see it wait
		}
		var ok [2]bool
		var delay [2]time.Duration
		var v Verdict
		for i := range 2 {
			reqs := []limit.Request{{Key: "app-1|/x", Params: p, Wait: 2 * time.Minute}}
			res := make([]limit.Result, 1)
			ok[i], v, _ = f.Allow(context.Background(), t0, reqs, res, localParams)
			delay[i] = res[0].Delay
			if reqs[0].Wait != 2*time.Minute {
				t.Errorf("the caller's request lost its Wait: %v", reqs[0].Wait)
			}
		}
		switch {
		case down && (v != LocalDecided || !ok[0] || ok[1] || delay[1] != 0):
			t.Errorf("store down: the second request %v (delay %v, %v); want refused at once, decided locally", ok[1], delay[1], v)
		case !down && (v != StoreDecided || !ok[1] || delay[1] <= 0):
			t.Errorf("store up: the second request %v (delay %v, %v); want admitted ahead by the store", ok[1], delay[1], v)
		}
	}
}
