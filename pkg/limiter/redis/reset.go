package redis

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
	"github.com/envoy-rls/envoy-rls/pkg/lua"
)

var _ limiter.Resetter = (*Store)(nil)

// scanCount is the COUNT hint of one SCAN step of ResetPolicy.
const scanCount = 500

// stateKeys matches every state key StorageKey and StorageKeyV1 build
// (and other names: stateKeyLayout tells them).
const stateKeys = "rate:{*}:state:*"

// Reset implements limiter.Resetter: one UNLINK per state key (on a
// Cluster each sent to its slot's master), all in one round trip per node.
// It returns how many keys existed.
func (s *Store) Reset(ctx context.Context, states []limiter.Request) (int, error) {
	if s.closed.Load() {
		return 0, errClosed
	}
	cmds := make(rueidis.Commands, 0, len(states))
	for i := range states {
		if states[i].Policy == nil {
			continue
		}
		k := string(requestKey(nil, &states[i]))
		cmds = append(cmds, s.client.B().Unlink().Key(k).Build())
	}
	if len(cmds) == 0 {
		return 0, nil
	}
	n := 0
	for _, r := range s.client.DoMulti(ctx, cmds...) {
		v, err := r.AsInt64()
		if err != nil {
			return n, fmt.Errorf("redis store: reset: %w", err)
		}
		n += int(v)
	}
	return n, nil
}

// ResetPolicy implements limiter.Resetter. It SCANs the keys named like
// states (stateKeys) on every master (a Cluster's replicas are skipped) and
// deletes the policy's states at revision, each by one run of
// reset-v1.lua, which deletes a key only when it holds a state this
// version writes and checks that in the same atomic run as the delete
// (resetPage). Every other key the scan finds is left alone, and counted
// in Skipped unless it is another policy's state. Its cost is one SCAN
// step per scanCount keys, and one pipelined round trip per step with a
// run of the program for each key named for the policy or in
// StorageKeyV1's layout, on every master: bound it with b.MaxScanned and
// ctx's deadline, and ask again while the answer is not Complete.
func (s *Store) ResetPolicy(ctx context.Context, policyID string, revision uint32, b limiter.ResetBounds) (limiter.PolicyReset, error) {
	var res limiter.PolicyReset
	if b.MaxScanned <= 0 {
		return res, &limiter.FieldError{Field: "MaxScanned", Reason: "must be positive"}
	}
	if s.closed.Load() {
		return res, errClosed
	}
	d := policyDigest(policyID, revision)
	target := resetTarget{policy: hex.EncodeToString(d[:]), v1Args: lua.ResetArgsV1(policyID, revision)}
	complete := true
	for addr, node := range s.client.Nodes() {
		master, err := isMaster(ctx, node)
		if err != nil {
			return res, fmt.Errorf("redis store: reset policy: node %s: %w", addr, err)
		}
		if !master {
			continue
		}
		done, err := resetOnNode(ctx, node, target, b.MaxScanned, &res)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return res, nil
			}
			return res, fmt.Errorf("redis store: reset policy: node %s: %w", addr, err)
		}
		complete = complete && done
	}
	res.Complete = complete
	return res, nil
}

// resetTarget is what a policy reset deletes: the keys of StorageKey's
// layout whose <policy> part is policy, and of StorageKeyV1's whose hash
// names the policy (reset-v1.lua's arguments v1Args).
type resetTarget struct {
	policy string
	v1Args []string
}

// isMaster reports whether ROLE names node a master.
func isMaster(ctx context.Context, node rueidis.Client) (bool, error) {
	arr, err := node.Do(ctx, node.B().Role().Build()).ToArray()
	if err != nil {
		return false, err
	}
	if len(arr) == 0 {
		return false, errors.New("empty ROLE reply")
	}
	role, err := arr[0].ToString()
	return role == "master", err
}

// resetOnNode scans one master until its cursor returns to 0 (done) or the
// bounds stop it.
func resetOnNode(ctx context.Context, node rueidis.Client, target resetTarget, maxScanned int, res *limiter.PolicyReset) (bool, error) {
	var cursor uint64
	for {
		if res.Scanned >= maxScanned {
			return false, nil
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
		count := int64(min(scanCount, maxScanned-res.Scanned))
		e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(stateKeys).Count(count).Build()).AsScanEntry()
		if err != nil {
			return false, err
		}
		res.Scanned += len(e.Elements)
		if err := resetPage(ctx, node, e.Elements, target, res); err != nil {
			return false, err
		}
		cursor = e.Cursor
		if cursor == 0 {
			return true, nil
		}
	}
}

// resetPage deletes the states of target among keys, one page of a scan.
// A key is read only when its name is exactly a state key's
// (stateKeyLayout) and could be target's: StorageKey's with target's
// <policy> part, or StorageKeyV1's (whose policy is in its hash).
// reset-v1.lua reads such a key and deletes it in the same run when it
// holds a state this version writes, so a key that changed after the scan
// found it (another type, another value) is judged as it is when deleted,
// never as it was. A key named in no layout, or holding no state, is
// counted in res.Skipped; a key named for another policy is not read (its
// name is the programs' layout: another policy's state).
func resetPage(ctx context.Context, node rueidis.Client, keys []string, target resetTarget, res *limiter.PolicyReset) error {
	var runs []scriptRun
	for _, k := range keys {
		switch layout, policy := stateKeyLayout(k); {
		case layout == layoutNone:
			res.Skipped++
		case layout == layoutV2 && policy == target.policy:
			runs = append(runs, scriptRun{key: k, args: lua.ResetArgsV2()})
		case layout == layoutV1:
			runs = append(runs, scriptRun{key: k, args: target.v1Args})
		}
	}
	for _, r := range resetScript.runAll(ctx, node, runs) {
		v, err := r.AsInt64()
		if err != nil {
			return err
		}
		switch deleted, foreign, err := lua.ParseResetReply(v); {
		case err != nil:
			return err
		case deleted:
			res.Deleted++
		case foreign:
			res.Skipped++
		}
	}
	return nil
}

// resetScript is reset-v1.lua.
var resetScript = newScript(lua.Reset().Source)

var _ limiter.Resetter = (*connector)(nil)

// Reset implements limiter.Resetter on the connected Store; before the
// connection it fails with the connection's error.
func (c *connector) Reset(ctx context.Context, states []limiter.Request) (int, error) {
	if st := c.store.Load(); st != nil {
		return st.Reset(ctx, states)
	}
	return 0, fmt.Errorf("redis store not connected: %w", *c.cause.Load())
}

// ResetPolicy implements limiter.Resetter on the connected Store; before
// the connection it fails with the connection's error.
func (c *connector) ResetPolicy(ctx context.Context, policyID string, revision uint32, b limiter.ResetBounds) (limiter.PolicyReset, error) {
	if st := c.store.Load(); st != nil {
		return st.ResetPolicy(ctx, policyID, revision, b)
	}
	return limiter.PolicyReset{}, fmt.Errorf("redis store not connected: %w", *c.cause.Load())
}
