package descriptors

import (
	"gopkg.in/yaml.v3"
)

// nameRef is one entry of a rate_limit's replaces list: the name of
// another rule, at the entry's position.
type nameRef struct {
	name    string
	pos     pos
	namePos pos
}

// rawLimit is one rate_limit block (or one entry of `policies:`). A field's
// *Pos is non-zero when the key was present.
type rawLimit struct {
	pos pos

	unit              string
	unitPos           pos
	rpu               uint32
	rpuPos            pos
	unlimited         bool
	unlimitedPos      pos
	name              string
	namePos           pos
	replaces          []nameRef
	replacesPos       pos
	unitMultiplier    uint32
	unitMultiplierPos pos
	algorithm         string
	algorithmPos      pos
	burst             uint32
	burstPos          pos
	failureMode       string
	failureModePos    pos
	revision          uint32
	revisionPos       pos
	headers           string
	headersPos        pos
	calendar          bool
	calendarPos       pos
	timeZone          string
	timeZonePos       pos
	penalty           *rawPenalty
	penaltyPos        pos
	// concurrency and leaseTTL make the rule a concurrency limit
	// (concurrency.go).
	concurrency    uint32
	concurrencyPos pos
	leaseTTL       string
	leaseTTLPos    pos
	charge         string
	chargePos      pos
	reserve        *rawReserve
	reservePos     pos
}

// limitFields are the keys of a rate_limit block: the reference's first,
// then this project's extensions.
var limitFields = fields[rawLimit]{
	strField("unit", func(r *rawLimit) (*string, *pos) { return &r.unit, &r.unitPos }),
	uint32Field("requests_per_unit", 0, func(r *rawLimit) (*uint32, *pos) { return &r.rpu, &r.rpuPos }),
	boolField("unlimited", func(r *rawLimit) (*bool, *pos) { return &r.unlimited, &r.unlimitedPos }),
	strField("name", func(r *rawLimit) (*string, *pos) { return &r.name, &r.namePos }),
	nodeField("replaces", (*parser).replaces, func(r *rawLimit) (*[]nameRef, *pos) { return &r.replaces, &r.replacesPos }),
	uint32Field("unit_multiplier", 1, func(r *rawLimit) (*uint32, *pos) { return &r.unitMultiplier, &r.unitMultiplierPos }),
	strField("algorithm", func(r *rawLimit) (*string, *pos) { return &r.algorithm, &r.algorithmPos }),
	uint32Field("burst", 1, func(r *rawLimit) (*uint32, *pos) { return &r.burst, &r.burstPos }),
	strField("failure_mode", func(r *rawLimit) (*string, *pos) { return &r.failureMode, &r.failureModePos }),
	uint32Field("revision", 1, func(r *rawLimit) (*uint32, *pos) { return &r.revision, &r.revisionPos }),
	strField("headers", func(r *rawLimit) (*string, *pos) { return &r.headers, &r.headersPos }),
	boolField("calendar", func(r *rawLimit) (*bool, *pos) { return &r.calendar, &r.calendarPos }),
	strField("time_zone", func(r *rawLimit) (*string, *pos) { return &r.timeZone, &r.timeZonePos }),
	nodeField("penalty", (*parser).penalty, func(r *rawLimit) (**rawPenalty, *pos) { return &r.penalty, &r.penaltyPos }),
	uint32Field("concurrency", 0, func(r *rawLimit) (*uint32, *pos) { return &r.concurrency, &r.concurrencyPos }),
	strField("lease_ttl", func(r *rawLimit) (*string, *pos) { return &r.leaseTTL, &r.leaseTTLPos }),
	strField("charge", func(r *rawLimit) (*string, *pos) { return &r.charge, &r.chargePos }),
	nodeField("reserve", (*parser).reserve, func(r *rawLimit) (**rawReserve, *pos) { return &r.reserve, &r.reservePos }),
}

// replacesFields are the keys of one entry of a replaces list.
var replacesFields = fields[nameRef]{
	{"name", func(p *parser, r *nameRef, k, v *yaml.Node) {
		r.namePos = at(k)
		r.name, _ = p.str(v, "replaces.name")
	}},
}

// spend walks a subtree, charging the budget; it reports whether the budget
// ran out.
func (p *parser) spend(n *yaml.Node) bool {
	n = p.resolve(n)
	if n == nil {
		return true
	}
	for _, c := range n.Content {
		if p.spend(c) {
			return true
		}
	}
	return false
}

func (p *parser) rateLimit(n *yaml.Node, what string) *rawLimit {
	return block(p, n, limitFields, what, what+" must be a mapping, got null", func(at pos) *rawLimit { return &rawLimit{pos: at} })
}

func (p *parser) replaces(n *yaml.Node) []nameRef {
	if n = p.sequence(n, "replaces must be a list of {name: ...}"); n == nil {
		return nil
	}
	var out []nameRef
	for _, c := range n.Content {
		c = p.resolve(c)
		if c == nil {
			return out
		}
		ref := nameRef{pos: at(c)}
		replacesFields.read(p, c, "a replaces entry", "in a replaces entry", &ref)
		if c.Kind == yaml.MappingNode && !ref.namePos.set() {
			p.errorf(c, "a replaces entry needs a name")
			continue
		}
		if c.Kind == yaml.MappingNode && ref.name == "" {
			p.errorf(c, "should not have an empty replaces entry")
			continue
		}
		if c.Kind == yaml.MappingNode {
			out = append(out, ref)
		}
	}
	return out
}
