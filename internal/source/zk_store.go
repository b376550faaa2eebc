package source

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/go-zookeeper/zk"
)

// zkHistoryDigits pads the versions in the history's znode names, as
// zkCli lists them in the order of their names.
const zkHistoryDigits = 10

// HistoryPath returns the znode whose children hold the replaced values:
// <path>/history, each child named by the version a value had, padded
// with zeros to 10 digits. The gateway watches only the data of the
// rules' znode, which its children do not change.
func (z *ZK) HistoryPath() string { return z.key + "/history" }

func (z *ZK) historyNode(version int64) string {
	return fmt.Sprintf("%s/%0*d", z.HistoryPath(), zkHistoryDigits, version)
}

// Get reads the znode's data and version.
func (z *ZK) Get(ctx context.Context) (Value, error) {
	ctx, cancel := context.WithTimeout(ctx, z.timeout)
	defer cancel()
	v, _, err := z.get(ctx)
	if err != nil {
		return Value{}, fmt.Errorf("reading %s: %w", z.name, err)
	}
	return v, nil
}

// historyVersions returns the versions the history holds, oldest first,
// and whether its znode exists.
func (z *ZK) historyVersions(ctx context.Context) ([]int64, bool, error) {
	names, err := do(ctx, z, true, func() ([]string, error) {
		names, _, err := z.conn.Children(z.HistoryPath())
		return names, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the history of %s: %w", z.name, err)
	}
	var versions []int64
	for _, n := range names {
		if v, err := strconv.ParseInt(n, 10, 64); err == nil && v >= 0 {
			versions = append(versions, v)
		}
	}
	slices.Sort(versions)
	return versions, true, nil
}

// Put writes data in one ZooKeeper multi-op that succeeds only if the
// znode's version is still prev's (or, prev being NoVersion, if the
// znode does not exist), and that also writes prev as a child of
// HistoryPath and deletes the history's oldest values beyond keep. The
// znode's parents are created first if they are missing. The new
// version is the znode's data version.
//
// ZooKeeper numbers the versions of a znode from 0 again when it is
// deleted and created anew: the compare-and-set cannot tell a version of
// the old znode from the same version of the new one.
func (z *ZK) Put(ctx context.Context, data []byte, prev Value, keep int) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, z.timeout)
	defer cancel()
	if err := z.ready(ctx); err != nil {
		return 0, err
	}
	if prev.Version == NoVersion {
		if err := z.createParents(ctx); err != nil {
			return 0, err
		}
	}
	versions, histExists, err := z.historyVersions(ctx)
	if err != nil {
		return 0, err
	}
	var ops []any
	if prev.Version == NoVersion {
		ops = append(ops, &zk.CreateRequest{Path: z.key, Data: data, Acl: z.acl})
	} else {
		ops = append(ops, &zk.SetDataRequest{Path: z.key, Data: data, Version: int32(prev.Version)})
	}
	if prev.Version != NoVersion && keep > 0 {
		if !histExists {
			ops = append(ops, &zk.CreateRequest{Path: z.HistoryPath(), Acl: z.acl})
		}
		if i := slices.Index(versions, prev.Version); i >= 0 {
			// A version of an earlier znode of the same path.
			ops = append(ops, &zk.DeleteRequest{Path: z.historyNode(prev.Version), Version: -1})
			versions = slices.Delete(versions, i, i+1)
		}
		ops = append(ops, &zk.CreateRequest{Path: z.historyNode(prev.Version), Data: prev.Data, Acl: z.acl})
		keep-- // prev takes one place
	}
	for _, v := range versions[:max(len(versions)-max(keep, 0), 0)] {
		ops = append(ops, &zk.DeleteRequest{Path: z.historyNode(v), Version: -1})
	}
	resps, err := do(ctx, z, false, func() ([]zk.MultiResponse, error) { return z.conn.Multi(ops...) })
	if err != nil {
		if len(resps) > 0 && conflicting(resps[0].Error) {
			cur, _, gerr := z.get(ctx)
			if gerr != nil {
				return 0, fmt.Errorf("writing %s: %w; and reading the current version: %w", z.name, err, gerr)
			}
			return 0, &ConflictError{Source: z.name, Expected: prev.Version, Current: cur.Version}
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Errorf("writing %s: %w: the write may or may not have been made; look with gateway rules get", z.name, err)
		}
		return 0, fmt.Errorf("writing %s: %w", z.name, err)
	}
	if prev.Version == NoVersion {
		return 0, nil // a new znode's first version
	}
	return int64(resps[0].Stat.Version), nil
}

// conflicting reports whether err, the error of a multi-op's write of the
// rules' znode, means someone else wrote it since it was read.
func conflicting(err error) bool {
	return errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrNoNode)
}

// createParents creates the missing parents of the rules' znode.
func (z *ZK) createParents(ctx context.Context) error {
	for i := 1; i < len(z.key); i++ {
		if z.key[i] != '/' {
			continue
		}
		parent := z.key[:i]
		_, err := do(ctx, z, false, func() (string, error) { return z.conn.Create(parent, nil, 0, z.acl) })
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("creating %s in %s: %w", parent, z.name, err)
		}
	}
	return nil
}

// History reads the values kept under HistoryPath, newest first. Children
// there whose names are not versions are left out.
func (z *ZK) History(ctx context.Context) ([]Value, error) {
	ctx, cancel := context.WithTimeout(ctx, z.timeout)
	defer cancel()
	if err := z.ready(ctx); err != nil {
		return nil, err
	}
	versions, _, err := z.historyVersions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Value, 0, len(versions))
	for _, v := range slices.Backward(versions) {
		data, err := do(ctx, z, true, func() ([]byte, error) {
			data, _, err := z.conn.Get(z.historyNode(v))
			return data, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // pruned meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("reading the history of %s: %w", z.name, err)
		}
		out = append(out, Value{Data: data, Version: v})
	}
	return out, nil
}
