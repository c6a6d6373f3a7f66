package lua

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

//go:embed demand-v1.lua
var demandV1 string

// Demand returns demand-v1.lua, the program of one replica's turn in the
// exchange of RLQS demands of one aggregate: publish its own, read the
// other live replicas'. It is not one of Programs, the rate programs.
func Demand() program { return program{Name: "demand-v1.lua", Source: demandV1} }

// Bounds of demand-v1.lua's arguments.
const (
	// MaxDemands is the most demands one replica publishes for one
	// aggregate.
	MaxDemands = 1024
	// MaxDemandReplicas is the most replicas whose demands one aggregate's
	// hash holds: a replica beyond them is refused.
	MaxDemandReplicas = 64
	// MaxDemandTTL is the longest life of a replica's entry.
	MaxDemandTTL = time.Hour
	// maxReplicaID is the longest replica identity.
	maxReplicaID = 64
)

// DemandArgs returns the ARGV of demand-v1.lua: replica's identity (1 to
// 64 bytes), ttl (1 ms to MaxDemandTTL, whole ms) and its demands (at most
// MaxDemands, each at least 0), each packed as 8 bytes big-endian.
func DemandArgs(replica string, ttl time.Duration, demands []int64) ([]string, error) {
	if len(replica) < 1 || len(replica) > maxReplicaID {
		return nil, fmt.Errorf("lua: demand arguments: a replica identity of %d bytes, want 1 to %d", len(replica), maxReplicaID)
	}
	if ttl < time.Millisecond || ttl > MaxDemandTTL || ttl%time.Millisecond != 0 {
		return nil, fmt.Errorf("lua: demand arguments: ttl %s, want whole milliseconds from 1ms to %s", ttl, MaxDemandTTL)
	}
	if len(demands) > MaxDemands {
		return nil, fmt.Errorf("lua: demand arguments: %d demands, more than %d", len(demands), MaxDemands)
	}
	b := make([]byte, 0, 8*len(demands))
	for _, d := range demands {
		if d < 0 {
			return nil, errors.New("lua: demand arguments: a negative demand")
		}
		b = binary.BigEndian.AppendUint64(b, uint64(d))
	}
	return []string{replica, strconv.FormatInt(ttl.Milliseconds(), 10), string(b)}, nil
}

// ParseDemandReply validates a reply of demand-v1.lua and appends the
// demands it holds to others: at most MaxDemandReplicas-1 strings, each
// whole 8-byte integers, at most MaxDemands of them, none negative. Any
// other reply is an error matching ErrMalformedReply, and others is
// returned as it was given.
func ParseDemandReply(values []Value, others []int64) ([]int64, error) {
	if len(values) > MaxDemandReplicas-1 {
		return others, malformed("demand reply of %d replicas, more than %d", len(values), MaxDemandReplicas-1)
	}
	n := len(others)
	for i, v := range values {
		if v.IsInt || len(v.Str)%8 != 0 || len(v.Str) > 8*MaxDemands {
			return others[:n], malformed("demand reply element %d: not whole demands", i)
		}
		for at := 0; at < len(v.Str); at += 8 {
			d := binary.BigEndian.Uint64([]byte(v.Str[at : at+8]))
			if d > math.MaxInt64 {
				return others[:n], malformed("demand reply element %d: a negative demand", i)
			}
			others = append(others, int64(d))
		}
	}
	return others, nil
}
