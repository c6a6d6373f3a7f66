package descriptors

import (
	"encoding/hex"
	"slices"
	"sync"

	"github.com/envoy-rls/envoy-rls/pkg/limiter"
)

// MinSecretLength is the shortest HMAC secret Load accepts.
const MinSecretLength = 16

// Options configure Load, LoadChanged and Compile.
type Options struct {
	// Secret keys the HMAC that pseudonymizes subjects; at least
	// MinSecretLength bytes. Load keeps its own copy. (Required)
	Secret []byte
	// DefaultFailureMode is the failure mode of the rate limits and named
	// policies that set no failure_mode. (Optional, default
	// limiter.FailClosed)
	DefaultFailureMode limiter.FailureMode
	// ShadowAll puts every rule in shadow mode, as if each set
	// shadow_mode: true: counted and reported, never denying. (Optional)
	ShadowAll bool
	// DefaultCharge is the charge of the rate limits and named policies
	// that set none; a limit with a penalty box keeps
	// limiter.ChargeAllowed. (Optional, default limiter.ChargeAllowed)
	DefaultCharge limiter.Charge
	// Limits bound the whole rule set. (Optional, the zero value means
	// DefaultMaxBytes and DefaultMaxDescriptors)
	Limits Limits
}

// Snapshot is an immutable, compiled rule set. It is safe for concurrent use
// by multiple goroutines. A nil *Snapshot knows no domain and matches
// nothing.
type Snapshot struct {
	domains     map[string]*domain
	order       []*domain // sorted by name
	files       []string
	fingerprint [32]byte
	rules       int
	limited     int
	// macs holds *macState values keyed with the HMAC secret. The secret is
	// captured by the pool's New function only, so that printing a Snapshot
	// never prints it.
	macs      sync.Pool
	overrides overrideCache
	// overrideCharge is the charge of the policies overrides make
	// (Options.DefaultCharge): compatibility mode's reference counting
	// covers them as it covers the configured rules.
	overrideCharge limiter.Charge
}

type domain struct {
	name string
	file string
	// fields are the field paths the positions of a Document number (nil
	// for a rule file).
	fields      docFields
	root        *level
	rules       []*Rule // configuration order
	policyNames []string
	replaceRefs []nameRef // only while compiling
}

// level is one list of descriptors: by key, then exact value, wildcard
// values (configuration order) and the key-only rule.
type level struct {
	byKey map[string]*keyGroup
}

type keyGroup struct {
	exact     map[string]*node
	wildcards []*node
	keyOnly   *node
}

type node struct {
	rule     *Rule // nil when the descriptor has no rate_limit
	pattern  string
	parts    []string // pattern split at '*'
	share    bool
	children *level
	src      pos
}

// HasDomain reports whether the snapshot holds rules for domain.
func (s *Snapshot) HasDomain(domain string) bool {
	if s == nil {
		return false
	}
	_, ok := s.domains[domain]
	return ok
}

// Fingerprint is a hex SHA-256 over the file names and contents (or the
// Documents) the snapshot was built from; equal fingerprints mean identical
// input.
func (s *Snapshot) Fingerprint() string {
	if s == nil {
		return ""
	}
	return hex.EncodeToString(s.fingerprint[:])
}

// Size returns the number of domains and of rules of the snapshot.
func (s *Snapshot) Size() (domains, rules int) {
	return len(s.order), s.rules
}

// Files lists the rule files (or Document names) the snapshot was built
// from.
func (s *Snapshot) Files() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.files)
}

// Policies returns the policy of every limited rule, by domain name and
// then in rule order; a policy that several rules share comes once per
// rule. The policies of request-supplied overrides are not among them.
func (s *Snapshot) Policies() []*limiter.Policy {
	if s == nil {
		return nil
	}
	ps := make([]*limiter.Policy, 0, s.limited)
	for _, d := range s.order {
		for _, r := range d.rules {
			if r.Policy != nil {
				ps = append(ps, r.Policy)
			}
		}
	}
	return ps
}
