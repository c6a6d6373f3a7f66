package app

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/envoy-rls/envoy-rls/internal/admin"
	"github.com/envoy-rls/envoy-rls/internal/options"
	"github.com/envoy-rls/envoy-rls/internal/redact"
	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/envoy-rls/envoy-rls/pkg/limiter/redis"
)

const digestUsage = `Usage: envoy-rls digest --config PATH --domain D --descriptor k=v[,k2=v2]

Prints, for each limit the descriptor matches (one for a rate_limit, one per
entry of rate_limits), a line "<subject digest> <policy ID> <Redis key>". The
denial logs show the digest's first 8 hex digits. It needs the service's HMAC
secret (--hmac-secret-file or ` + options.SecretEnv + `), as serve does.

Flags:
`

const explainUsage = `Usage: envoy-rls explain --admin URL --token-file F --domain D --descriptor k=v[,k2=v2]
       envoy-rls explain --config PATH --domain D --descriptor k=v[,k2=v2]

Prints, as JSON, which rule the descriptor matches and why (POST /v1/explain).
With --admin it asks a running instance, which also reads each limit's state
without consuming; with --config it reads the rule files (no state; the
subject digests only with the service's HMAC secret).

Flags:
`

// explainClientTimeout bounds the call of `explain --admin`.
const explainClientTimeout = 10 * time.Second

// cliRules are the flags digest and explain share.
type cliRules struct {
	config, domain, descriptor, secretFile string
	lim                                    options.RuleLimits
}

func (c *cliRules) add(fs *flag.FlagSet) {
	fs.StringVar(&c.config, "config", "", "rule file or directory of rule files")
	fs.StringVar(&c.domain, "domain", "", "the descriptor's domain")
	fs.StringVar(&c.descriptor, "descriptor", "", "the descriptor's entries, k1=v1,k2=v2 in order")
	fs.StringVar(&c.secretFile, "hmac-secret-file", "", "file holding the service's HMAC secret (else $"+options.SecretEnv+")")
	options.AddRuleLimitFlags(fs, &c.lim)
}

// parse adds the shared flags to fs (which may hold the command's own),
// parses args and the environment, and checks --domain and --descriptor.
// After -h it prints help and returns no values and no error.
func (c *cliRules) parse(fs *flag.FlagSet, args []string, getenv func(string) string, help string, stdout io.Writer) (map[string]options.Given, []descriptors.Entry, error) {
	c.add(fs)
	seen, err := options.Parse(fs, args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		options.PrintUsage(stdout, help, fs)
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	entries, err := c.entries()
	return seen, entries, err
}

// entries checks --domain and --descriptor.
func (c *cliRules) entries() ([]descriptors.Entry, error) {
	if c.domain == "" {
		return nil, errors.New("--domain is required")
	}
	q := map[string][]string{"descriptor": {c.descriptor}}
	return admin.ParseDescriptor(q)
}

// load reads the rules; with needSecret, a configured secret is required.
func (c *cliRules) load(getenv func(string) string, seen map[string]options.Given, needSecret bool) (*descriptors.Snapshot, bool, error) {
	if c.config == "" {
		return nil, false, errors.New("--config is required")
	}
	o := &options.Options{HMACSecretFile: c.secretFile, Given: seen}
	configured := c.secretFile != "" || getenv(options.SecretEnv) != ""
	if needSecret && !configured {
		return nil, false, fmt.Errorf("the service's HMAC secret is required: --hmac-secret-file (or %s) or %s", options.EnvName("hmac-secret-file"), options.SecretEnv)
	}
	secret, _, err := options.ReadSecret(o, getenv)
	if err != nil {
		return nil, false, err
	}
	snap, err := descriptors.Load(c.config, descriptors.Options{Secret: secret, Limits: c.lim.Limits()})
	if err != nil {
		return nil, false, fmt.Errorf("--config %s: %w", c.config, err)
	}
	return snap, configured, nil
}

// digestCommand prints the subject digests of a descriptor.
func digestCommand(args []string, getenv func(string) string, stdout io.Writer) error {
	var c cliRules
	seen, entries, err := c.parse(flag.NewFlagSet("envoy-rls digest", flag.ContinueOnError), args, getenv, digestUsage, stdout)
	if err != nil || seen == nil {
		return err
	}
	snap, _, err := c.load(getenv, seen, true)
	if err != nil {
		return err
	}
	d := admin.Explain(snap, c.domain, entries)
	if !d.Matched {
		return fmt.Errorf("no rule of domain %q matches the descriptor: %s", c.domain, d.Reason)
	}
	if len(d.Limits) == 0 {
		return errors.New("the descriptor matches an unlimited rule: it has no subject")
	}
	for _, l := range d.Limits {
		req := l.Request()
		key := redis.StorageKey(nil, req.Policy, req.Subject, req.Tag)
		fmt.Fprintf(stdout, "%s %s %s\n", hex.EncodeToString(req.Subject[:]), l.PolicyID, key)
	}
	return nil
}

// explainCommand prints the explain answer of a descriptor, from a running
// instance (--admin) or from rule files (--config).
func explainCommand(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("envoy-rls explain", flag.ContinueOnError)
	var c cliRules
	var adminURL, tokenFile string
	fs.StringVar(&adminURL, "admin", "", "the admin address of a running instance: http://HOST:PORT, https://HOST:PORT or HOST:PORT (http), e.g. 127.0.0.1:8080")
	fs.StringVar(&tokenFile, "token-file", "", "file holding an admin token (the token alone, or a name:token line of --admin-token-file)")
	seen, entries, err := c.parse(fs, args, getenv, explainUsage, stdout)
	if err != nil || seen == nil {
		return err
	}
	// --admin wins over --config (which a pod's ENVOY_RLS_CONFIG may set).
	switch {
	case adminURL != "":
		return explainRemote(ctx, adminURL, tokenFile, c.domain, entries, stdout)
	case c.config == "":
		return errors.New("--admin URL (a running instance) or --config PATH (rule files) is required")
	}
	snap, withSecret, err := c.load(getenv, seen, false)
	if err != nil {
		return err
	}
	d := admin.Explain(snap, c.domain, entries)
	if !withSecret {
		d.SubjectDigest = ""
		for i := range d.Limits {
			d.Limits[i].SubjectDigest = ""
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(admin.ExplainAnswer{Domain: c.domain, Descriptors: []admin.Explanation{d}})
}

// readClientToken reads the token of --token-file (admin.ClientToken).
func readClientToken(path string) (string, error) {
	if path == "" {
		return "", errors.New("--token-file is required with --admin")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	token, ok := admin.ClientToken(b)
	if !ok {
		return "", fmt.Errorf("--token-file %s: no token", path)
	}
	return token, nil
}

func explainRemote(ctx context.Context, adminURL, tokenFile, domain string, entries []descriptors.Entry, stdout io.Writer) error {
	token, err := readClientToken(tokenFile)
	if err != nil {
		return err
	}
	d := &rlv3.RateLimitDescriptor{}
	for _, e := range entries {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
	}
	body, err := protojson.Marshal(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{d}})
	if err != nil {
		return fmt.Errorf("encoding the request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, explainClientTimeout)
	defer cancel()
	base, err := adminBase(adminURL)
	if err != nil {
		return err
	}
	url := base + "/v1/explain"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return adminURLError(adminURL)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("explain: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("explain: %s answered %s: %s", redact.URLs(url), resp.Status, strings.TrimSpace(string(out)))
	}
	_, err = stdout.Write(out)
	return err
}

// adminBase is the admin URL of --admin without a trailing slash: an
// http:// or https:// URL, or host:port, taken as http://host:port (what
// --admin-addr and kubectl port-forward print).
func adminBase(adminURL string) (string, error) {
	s := adminURL
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := neturl.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return "", adminURLError(adminURL)
	}
	return strings.TrimRight(s, "/"), nil
}

// adminURLError says what --admin takes. The value is quoted without a URL
// password (the parser's own error quotes the URL whole).
func adminURLError(adminURL string) error {
	return fmt.Errorf("--admin %q: must be the admin address as http://HOST:PORT (such as http://127.0.0.1:8080), https://HOST:PORT, or HOST:PORT (taken as http)", redact.URLs(adminURL))
}
