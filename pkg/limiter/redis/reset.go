package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

var _ limiter.Resetter = (*Store)(nil)

// scanCount is the COUNT hint of one SCAN step of ResetPolicy.
const scanCount = 500

// stateKeys matches every state key StorageKey builds.
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

// ResetPolicy implements limiter.Resetter. State keys are digests, so the
// policy is read from each state's own fields: it SCANs the state keys of
// every master (a Cluster's replicas are skipped), reads the `policy` and
// `rev` fields of each batch of keys in one round trip, and UNLINKs those of
// policyID at revision. A key that matches the pattern but holds no hash is
// not a state of this service: Redis answers its HMGET with WRONGTYPE, and
// it is counted in Skipped and left alone. Its cost is one SCAN step per
// scanCount keys and one HMGET per key, on every master: bound it with
// b.MaxScanned and ctx's deadline, and ask again while the answer is not
// Complete.
func (s *Store) ResetPolicy(ctx context.Context, policyID string, revision uint32, b limiter.ResetBounds) (limiter.PolicyReset, error) {
	var res limiter.PolicyReset
	if b.MaxScanned <= 0 {
		return res, &limiter.FieldError{Field: "MaxScanned", Reason: "must be positive"}
	}
	if s.closed.Load() {
		return res, errClosed
	}
	rev := strconv.FormatUint(uint64(revision), 10)
	complete := true
	for addr, node := range s.client.Nodes() {
		master, err := isMaster(ctx, node)
		if err != nil {
			return res, fmt.Errorf("redis store: reset policy: node %s: %w", addr, err)
		}
		if !master {
			continue
		}
		done, err := s.resetOnNode(ctx, node, policyID, rev, b.MaxScanned, &res)
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
func (s *Store) resetOnNode(ctx context.Context, node rueidis.Client, policyID, rev string, maxScanned int, res *limiter.PolicyReset) (bool, error) {
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
		if err := s.unlinkMatching(ctx, node, e.Elements, policyID, rev, res); err != nil {
			return false, err
		}
		cursor = e.Cursor
		if cursor == 0 {
			return true, nil
		}
	}
}

// unlinkMatching reads the policy and revision of keys and unlinks those
// that match; a key that is not a hash is counted in res.Skipped.
func (s *Store) unlinkMatching(ctx context.Context, node rueidis.Client, keys []string, policyID, rev string, res *limiter.PolicyReset) error {
	if len(keys) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = node.B().Hmget().Key(k).Field("policy", "rev").Build()
	}
	var del rueidis.Commands
	for i, r := range node.DoMulti(ctx, cmds...) {
		f, err := r.ToArray()
		if isWrongType(err) {
			res.Skipped++
			continue
		}
		if err != nil {
			return err
		}
		if len(f) != 2 {
			continue
		}
		p, err1 := f[0].ToString()
		v, err2 := f[1].ToString()
		if err1 == nil && err2 == nil && p == policyID && v == rev {
			del = append(del, node.B().Unlink().Key(keys[i]).Build())
		}
	}
	if len(del) == 0 {
		return nil
	}
	for _, r := range node.DoMulti(ctx, del...) {
		n, err := r.AsInt64()
		if err != nil {
			return err
		}
		res.Deleted += int(n)
	}
	return nil
}

var _ limiter.Resetter = (*Connector)(nil)

// Reset implements limiter.Resetter on the connected Store; before the
// connection it fails with the connection's error.
func (c *Connector) Reset(ctx context.Context, states []limiter.Request) (int, error) {
	if st := c.store.Load(); st != nil {
		return st.Reset(ctx, states)
	}
	return 0, fmt.Errorf("redis store not connected: %w", *c.cause.Load())
}

// ResetPolicy implements limiter.Resetter on the connected Store; before
// the connection it fails with the connection's error.
func (c *Connector) ResetPolicy(ctx context.Context, policyID string, revision uint32, b limiter.ResetBounds) (limiter.PolicyReset, error) {
	if st := c.store.Load(); st != nil {
		return st.ResetPolicy(ctx, policyID, revision, b)
	}
	return limiter.PolicyReset{}, fmt.Errorf("redis store not connected: %w", *c.cause.Load())
}
