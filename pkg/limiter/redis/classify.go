package redis

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/rueidis"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// classify maps a failed program run to an outcome by what is known about
// the state.
func classify(p *limiter.Policy, err error) limiter.Outcome {
	wrap := func(what string) error { return fmt.Errorf("redis store: policy %s: %s: %w", p.ID(), what, err) }
	if rerr, ok := rueidis.IsRedisErr(err); ok {
		// Redis answered with an error: the program either did not start
		// or failed before its single write (it writes last).
		return classifyText(p, rerr.Error(), err)
	}
	if notSent(err) {
		return limiter.UnavailableOutcome(DefaultRetryAfter, limiter.CategoryNotConnected, wrap("not sent"))
	}
	// Sent (or possibly sent) and no answer: timeout, connection lost.
	return limiter.IndeterminateOutcome(DefaultRetryAfter, wrap("no answer"))
}

// classifyText maps a Redis error reply's text (of the whole run, or of one
// request's command inside it) to an outcome: a refusal is Unavailable,
// anything else a failed program (Incompatible). Either way the request
// wrote nothing: the program writes last, and Redis refuses a script's
// first write, never a later one.
func classifyText(p *limiter.Policy, msg string, err error) limiter.Outcome {
	wrap := func(what string) error { return fmt.Errorf("redis store: policy %s: %s: %w", p.ID(), what, err) }
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "BUSY", "OOM":
		return limiter.UnavailableOutcome(DefaultRetryAfter, limiter.CategoryCapacity, wrap("refused by Redis"))
	case "NOPERM", "NOAUTH", "WRONGPASS", "READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN",
		"TRYAGAIN", "MOVED", "ASK", "CROSSSLOT", "NOREPLICAS", "MISCONF", "NOSCRIPT":
		return limiter.UnavailableOutcome(DefaultRetryAfter, limiter.CategoryNotConnected, wrap("refused by Redis"))
	}
	if functionNotFound(msg) {
		// FCALL ran nothing, like NOSCRIPT (function.go).
		return limiter.UnavailableOutcome(DefaultRetryAfter, limiter.CategoryNotConnected, wrap("refused by Redis"))
	}
	return limiter.IncompatibleOutcome(limiter.CategoryProgramInvalid, wrap("program failed"))
}

// notSent reports errors that rueidis returns only before writing the
// command: the dial failed (refused, unreachable, timed out connecting), no
// node serves the slot. rueidis.ErrClosing is not among them: a connection
// closed under in-flight commands (a topology change) fails those with it too.
func notSent(err error) bool {
	if errors.Is(err, rueidis.ErrNoSlot) || errors.Is(err, rueidis.ErrNoAddr) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
