package options

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/envoy-rls/envoy-rls/internal/credfiles"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// Defaults of the rule-set bounds (--config-max-bytes,
// --config-max-descriptors), shared by serve and validate.
const (
	DefaultConfigMaxBytes       = descriptors.DefaultMaxBytes
	DefaultConfigMaxDescriptors = descriptors.DefaultMaxDescriptors
)

// RuleLimits are the --config-max-* values.
type RuleLimits struct {
	MaxBytes       int64
	MaxDescriptors int
}

// AddRuleLimitFlags defines the rule-set bounds on fs.
func AddRuleLimitFlags(fs *flag.FlagSet, l *RuleLimits) {
	fs.Int64Var(&l.MaxBytes, "config-max-bytes", DefaultConfigMaxBytes, "the most bytes of all rule files together (checked before they are read, at start and on every reload)")
	fs.IntVar(&l.MaxDescriptors, "config-max-descriptors", DefaultConfigMaxDescriptors, "the most descriptors of all rule files together, nested ones included (at start and on every reload)")
}

// Check reports the bounds that are not positive.
func (l RuleLimits) Check(seen map[string]Given) []error {
	r := refusals{given: seen}
	l.check(&r)
	return r.errs
}

func (l RuleLimits) check(r *refusals) {
	r.must("config-max-bytes", l.MaxBytes > 0)
	r.must("config-max-descriptors", l.MaxDescriptors > 0)
}

// Limits are the bounds as the rules' loader takes them.
func (l RuleLimits) Limits() descriptors.Limits {
	return descriptors.Limits{MaxBytes: l.MaxBytes, MaxDescriptors: l.MaxDescriptors}
}

// LimitMessage says that a rule set is over one of its bounds, and which
// flag raises it; "" when err is not a *descriptors.LimitError.
func LimitMessage(err error) string {
	var le *descriptors.LimitError
	if !errors.As(err, &le) {
		return ""
	}
	name := "config-max-bytes"
	if le.Limit == descriptors.LimitDescriptors {
		name = "config-max-descriptors"
	}
	return fmt.Sprintf("the %d rule file(s) hold %d %s, more than the limit of %d: raise --%s (or %s) to load them", le.Files, le.Total, le.Limit, le.Max, name, EnvName(name))
}

// maxSecretFileBytes bounds the HMAC secret file read.
const maxSecretFileBytes = 64 << 10

// ReadSecret returns the HMAC secret and where it came from: "file",
// "environment" or "random" (a per-process secret, when none is
// configured). A secret file others can read is refused, as the admin
// token file is (credfiles.Read). Errors never quote the secret.
func ReadSecret(o *Options, getenv func(string) string) ([]byte, string, error) {
	if o.HMACSecretFile != "" {
		b, err := credfiles.Read(o.HMACSecretFile, maxSecretFileBytes)
		if err != nil {
			return nil, "", fmt.Errorf("%s: must be a readable file holding the secret: %w", Label("hmac-secret-file", o.Given), err)
		}
		b = []byte(strings.TrimRight(string(b), "\r\n"))
		if len(b) < descriptors.MinSecretLength {
			return nil, "", fmt.Errorf("%s: must hold a secret of at least %d bytes (it holds %d)", Label("hmac-secret-file", o.Given), descriptors.MinSecretLength, len(b))
		}
		return b, "file", nil
	}
	if err := CheckSecretSource(o, getenv); err != nil {
		return nil, "", err
	}
	if v := getenv(SecretEnv); v != "" {
		return []byte(v), "environment", nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, "", fmt.Errorf("generating a random HMAC secret: %w", err)
	}
	return b, "random", nil
}

// CheckSecretSource refuses, without reading the secret file, a secret
// that cannot do: none at all with the Redis store (every replica must
// share one), or one too short in the environment.
func CheckSecretSource(o *Options, getenv func(string) string) error {
	if o.HMACSecretFile != "" {
		return nil
	}
	if v := getenv(SecretEnv); v != "" {
		if len(v) < descriptors.MinSecretLength {
			return fmt.Errorf("%s: must be at least %d bytes (it holds %d)", SecretEnv, descriptors.MinSecretLength, len(v))
		}
		return nil
	}
	if o.Store == "redis" && o.HMACSecretRedisKey == "" {
		return fmt.Errorf("--store redis needs an HMAC secret shared by every replica: set --hmac-secret-file (or %s) or %s", EnvName("hmac-secret-file"), SecretEnv)
	}
	return nil
}
