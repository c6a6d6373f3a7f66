package xds

import (
	"errors"
	"fmt"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

// The rule document a RateLimitConfig becomes: the rule file format's field
// names, so that the resource goes through the file compiler unchanged.
type (
	yamlConfig struct {
		Domain      string     `yaml:"domain"`
		Descriptors []yamlDesc `yaml:"descriptors,omitempty"`
	}
	yamlDesc struct {
		Key            string     `yaml:"key"`
		Value          string     `yaml:"value,omitempty"`
		RateLimit      *yamlLimit `yaml:"rate_limit,omitempty"`
		Descriptors    []yamlDesc `yaml:"descriptors,omitempty"`
		ShadowMode     bool       `yaml:"shadow_mode,omitempty"`
		DetailedMetric bool       `yaml:"detailed_metric,omitempty"`
	}
	yamlLimit struct {
		Unit            string        `yaml:"unit,omitempty"`
		RequestsPerUnit *uint32       `yaml:"requests_per_unit,omitempty"`
		Unlimited       bool          `yaml:"unlimited,omitempty"`
		Name            string        `yaml:"name,omitempty"`
		Replaces        []yamlReplace `yaml:"replaces,omitempty"`
	}
	yamlReplace struct {
		Name string `yaml:"name"`
	}
)

// ErrNil is returned for a nil resource.
var ErrNil = errors.New("xds: nil RateLimitConfig")

// Document turns one RateLimitConfig into the rule file it stands for: its
// domain, and its descriptors with the same keys, values, rate limits
// (unit, requests_per_unit, unlimited, name, replaces), shadow_mode and
// detailed_metric. Compiling the document (descriptors.Compile) validates
// it exactly as a rule file. Descriptors nested more than
// descriptors.MaxDepth levels deep are refused here, before the encoder
// walks them.
func Document(c *rlsconf.RateLimitConfig) ([]byte, error) {
	if c == nil {
		return nil, ErrNil
	}
	doc := yamlConfig{Domain: c.GetDomain()}
	var err error
	if doc.Descriptors, err = descList(c.GetDescriptors(), 1); err != nil {
		return nil, fmt.Errorf("xds: resource %q: %w", c.GetName(), err)
	}
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, fmt.Errorf("xds: resource %q: %w", c.GetName(), err)
	}
	return out, nil
}

func descList(ds []*rlsconf.RateLimitDescriptor, depth int) ([]yamlDesc, error) {
	if len(ds) == 0 {
		return nil, nil
	}
	if depth > descriptors.MaxDepth {
		return nil, fmt.Errorf("descriptors are nested more than %d levels deep", descriptors.MaxDepth)
	}
	out := make([]yamlDesc, 0, len(ds))
	for _, d := range ds {
		if d == nil {
			continue
		}
		y := yamlDesc{Key: d.GetKey(), Value: d.GetValue(), ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric()}
		if rl := d.GetRateLimit(); rl != nil {
			y.RateLimit = limit(rl)
		}
		var err error
		if y.Descriptors, err = descList(d.GetDescriptors(), depth+1); err != nil {
			return nil, err
		}
		out = append(out, y)
	}
	return out, nil
}

func limit(rl *rlsconf.RateLimitPolicy) *yamlLimit {
	y := &yamlLimit{Unlimited: rl.GetUnlimited(), Name: rl.GetName()}
	if rl.GetUnit() != rlsconf.RateLimitUnit_UNKNOWN {
		// SECOND, MINUTE, ...: the rule files take them in any case.
		y.Unit = strings.ToLower(rl.GetUnit().String())
	}
	if !y.Unlimited || rl.GetRequestsPerUnit() != 0 {
		n := rl.GetRequestsPerUnit()
		y.RequestsPerUnit = &n
	}
	for _, r := range rl.GetReplaces() {
		if r != nil {
			y.Replaces = append(y.Replaces, yamlReplace{Name: r.GetName()})
		}
	}
	return y
}

// Sources turns resources into the rule documents descriptors.Compile
// takes, one per resource, named "xds:" and the resource's name (its domain
// when the name is empty). Two resources of one name are refused.
func Sources(cs []*rlsconf.RateLimitConfig) ([]descriptors.Source, error) {
	out := make([]descriptors.Source, 0, len(cs))
	seen := make(map[string]bool, len(cs))
	for _, c := range cs {
		data, err := Document(c)
		if err != nil {
			return nil, err
		}
		name := c.GetName()
		if name == "" {
			name = c.GetDomain()
		}
		name = "xds:" + name
		if seen[name] {
			return nil, fmt.Errorf("xds: two resources are named %q", strings.TrimPrefix(name, "xds:"))
		}
		seen[name] = true
		out = append(out, descriptors.Source{Name: name, Data: data})
	}
	return out, nil
}

// Compile compiles resources as one rule set through descriptors.Compile:
// the same validation and policy IDs as the same rules in files.
func Compile(cs []*rlsconf.RateLimitConfig, opts descriptors.Options) (*descriptors.Snapshot, error) {
	srcs, err := Sources(cs)
	if err != nil {
		return nil, err
	}
	return descriptors.Compile(srcs, opts)
}
