package source_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ratelimit-gateway/gateway/internal/etcdtest"
	"github.com/ratelimit-gateway/gateway/internal/source"
)

func newEtcdStore(t *testing.T, srv *etcdtest.Server, key string) source.Store {
	t.Helper()
	st, err := source.NewStore(source.Config{Spec: srv.URL(key)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestEtcdPut(t *testing.T) {
	testPut(t, newEtcdStore(t, etcdtest.Start(t), "/gateway/rules"))
}

// testPut checks a store's writes: the first creates the key, each is
// refused (writing nothing) unless the key is still at the version read,
// each keeps the value it replaced in the history, and the history keeps
// only the newest values, however its size changes between writes.
func testPut(t *testing.T, st source.Store) {
	ctx := context.Background()

	cur, err := st.Get(ctx)
	if err != nil || cur.Version != source.NoVersion {
		t.Fatalf("Get of a missing key: got %+v, %v; want version NoVersion", cur, err)
	}
	v1, err := st.Put(ctx, []byte("v1"), cur, 3)
	if err != nil {
		t.Fatal(err)
	}
	var conflict *source.ConflictError
	if _, err := st.Put(ctx, []byte("again"), cur, 3); !errors.As(err, &conflict) || conflict.Current != v1 || conflict.Expected != source.NoVersion {
		t.Fatalf("second create: got %v, want a conflict at version %d", err, v1)
	}

	// Writes v2..v6, each on the value before it.
	versions := []int64{v1}
	for i := 2; i <= 6; i++ {
		cur, err := st.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		v, err := st.Put(ctx, fmt.Appendf(nil, "v%d", i), cur, 3)
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		versions = append(versions, v)
	}
	stale := source.Value{Data: []byte("v1"), Version: v1}
	if _, err := st.Put(ctx, []byte("stale"), stale, 3); !errors.As(err, &conflict) || conflict.Current != versions[5] || conflict.Expected != v1 {
		t.Fatalf("write on a stale version: got %v, want a conflict naming %d and %d", err, versions[5], v1)
	}
	if cur, _ := st.Get(ctx); string(cur.Data) != "v6" || cur.Version != versions[5] {
		t.Errorf("after the refused write: got %q at %d, want v6 at %d unchanged", cur.Data, cur.Version, versions[5])
	}
	checkHistory(t, st, []string{"v5", "v4", "v3"}, versions[4], versions[3], versions[2])

	// A smaller history, then one of 1, then none.
	for _, tt := range []struct {
		keep int
		want []string
	}{
		{keep: 2, want: []string{"v6", "v5"}},
		{keep: 1, want: []string{"w2"}},
		{keep: 0, want: nil},
	} {
		cur, _ := st.Get(ctx)
		if _, err := st.Put(ctx, []byte("w"+fmt.Sprint(tt.keep)), cur, tt.keep); err != nil {
			t.Fatalf("write keeping %d: %v", tt.keep, err)
		}
		checkHistory(t, st, tt.want)
	}
}

// checkHistory checks the values the history holds, newest first, and
// their versions if given.
func checkHistory(t *testing.T, st source.Store, want []string, versions ...int64) {
	t.Helper()
	hist, err := st.History(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var gotV []int64
	for _, v := range hist {
		got, gotV = append(got, string(v.Data)), append(gotV, v.Version)
	}
	if !slices.Equal(got, want) {
		t.Errorf("history: got %q, want %q", got, want)
	}
	if versions != nil && !slices.Equal(gotV, versions) {
		t.Errorf("history versions: got %v, want %v", gotV, versions)
	}
}
