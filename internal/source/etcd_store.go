package source

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ Store = (*Etcd)(nil)

// historyDigits pads the versions in the history's key names, so that
// their order as strings (etcd's) is their order as numbers and the
// oldest entries are one range of keys.
const historyDigits = 20

// HistoryPrefix returns the prefix of the keys that hold the replaced
// values: <key>/history/, then the version a value had, padded with
// zeros to 20 digits. The gateway watches only the key itself.
func (e *Etcd) HistoryPrefix() string { return e.key + "/history/" }

func (e *Etcd) historyKey(version int64) string {
	return fmt.Sprintf("%s%0*d", e.HistoryPrefix(), historyDigits, version)
}

// Get reads the key's value and mod revision.
func (e *Etcd) Get(ctx context.Context) (Value, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	v, err := e.get(ctx)
	if err != nil {
		return Value{}, fmt.Errorf("reading %s: %w", e.name, err)
	}
	return v, nil
}

// Put writes data in one etcd transaction that succeeds only if the key's
// mod revision is still prev's, and that also writes prev under
// HistoryPrefix and deletes the history's oldest values beyond keep. The
// new version is the transaction's revision.
func (e *Etcd) Put(ctx context.Context, data []byte, prev Value, keep int) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	ctx, done := e.refusing(ctx)
	defer done()
	hist, err := e.client.Get(ctx, e.HistoryPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return 0, fmt.Errorf("reading the history of %s: %w", e.name, e.unreachable(ctx, err))
	}
	ops := []clientv3.Op{clientv3.OpPut(e.key, string(data))}
	// The history's keys sort as their versions: the surplus is the
	// range from the prefix up to the oldest key kept.
	n, end, prevKey := len(hist.Kvs), clientv3.GetPrefixRangeEnd(e.HistoryPrefix()), ""
	if prev.Version != NoVersion && keep > 0 {
		prevKey = e.historyKey(prev.Version)
		ops = append(ops, clientv3.OpPut(prevKey, string(prev.Data)))
		n++
	}
	if drop := n - max(keep, 0); drop > 0 {
		if drop < len(hist.Kvs) {
			end = string(hist.Kvs[drop].Key)
		}
		if prevKey != "" {
			// etcd refuses a transaction that writes a key it deletes.
			// prev is newer than the history's values unless it is
			// stale, and then the comparison fails anyway.
			end = min(end, prevKey)
		}
		ops = append(ops, clientv3.OpDelete(e.HistoryPrefix(), clientv3.WithRange(end)))
	}
	want := prev.Version
	if want == NoVersion {
		want = 0 // etcd's mod revision of a key that does not exist
	}
	resp, err := e.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(e.key), "=", want)).
		Then(ops...).
		Else(clientv3.OpGet(e.key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Errorf("writing %s: %w: the write may or may not have been made; look with gateway rules get", e.name, e.unreachable(ctx, err))
		}
		return 0, fmt.Errorf("writing %s: %w", e.name, err)
	}
	if !resp.Succeeded {
		cur := NoVersion
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			cur = kvs[0].ModRevision
		}
		return 0, &ConflictError{Source: e.name, Expected: prev.Version, Current: cur}
	}
	return resp.Header.Revision, nil
}

// History reads the values kept under HistoryPrefix, newest first. Keys
// there whose names are not versions are left out.
func (e *Etcd) History(ctx context.Context) ([]Value, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	ctx, done := e.refusing(ctx)
	defer done()
	resp, err := e.client.Get(ctx, e.HistoryPrefix(), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	if err != nil {
		return nil, fmt.Errorf("reading the history of %s: %w", e.name, e.unreachable(ctx, err))
	}
	var out []Value
	for _, kv := range resp.Kvs {
		v, err := strconv.ParseInt(strings.TrimPrefix(string(kv.Key), e.HistoryPrefix()), 10, 64)
		if err != nil || v <= 0 {
			continue
		}
		out = append(out, Value{Data: kv.Value, Version: v})
	}
	return out, nil
}
