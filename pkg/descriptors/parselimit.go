package descriptors

import (
	"gopkg.in/yaml.v3"
)

type nameRef struct {
	name string
	pos  pos
}

// rawLimit is one rate_limit block (or one entry of `policies:`). A field's
// *Pos is non-zero when the key was present.
type rawLimit struct {
	pos pos

	unit               string
	unitPos            pos
	rpu                uint32
	rpuPos             pos
	unlimited          bool
	unlimitedPos       pos
	name               string
	namePos            pos
	replaces           []nameRef
	replacesPos        pos
	unitMultiplier     uint32
	unitMultiplierPos  pos
	algorithm          string
	algorithmPos       pos
	burst              uint32
	burstPos           pos
	failureMode        string
	failureModePos     pos
	revision           uint32
	revisionPos        pos
	headers            string
	headersPos         pos
	calendar           bool
	calendarPos        pos
	timeZone           string
	timeZonePos        pos
	penalty            *rawPenalty
	penaltyPos         pos
	extensionPositions []pos
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
	n = p.resolve(n)
	if n == nil {
		return nil
	}
	if isNull(n) {
		p.errorf(n, "%s must be a mapping, got null", what)
		return nil
	}
	rl := &rawLimit{pos: at(n)}
	ext := func(k *yaml.Node) pos {
		ps := at(k)
		rl.extensionPositions = append(rl.extensionPositions, ps)
		return ps
	}
	ok := p.mapping(n, what, func(key string, k, v *yaml.Node) {
		switch key {
		case "unit":
			rl.unitPos = at(k)
			rl.unit, _ = p.str(v, "unit")
		case "requests_per_unit":
			rl.rpuPos = at(k)
			rl.rpu, _ = p.uint32(v, "requests_per_unit", 0)
		case "unlimited":
			rl.unlimitedPos = at(k)
			rl.unlimited, _ = p.boolean(v, "unlimited")
		case "name":
			rl.namePos = at(k)
			rl.name, _ = p.str(v, "name")
		case "replaces":
			rl.replacesPos = at(k)
			rl.replaces = p.replaces(v)
		case "unit_multiplier":
			rl.unitMultiplierPos = ext(k)
			rl.unitMultiplier, _ = p.uint32(v, "unit_multiplier", 1)
		case "algorithm":
			rl.algorithmPos = ext(k)
			rl.algorithm, _ = p.str(v, "algorithm")
		case "burst":
			rl.burstPos = ext(k)
			rl.burst, _ = p.uint32(v, "burst", 1)
		case "failure_mode":
			rl.failureModePos = ext(k)
			rl.failureMode, _ = p.str(v, "failure_mode")
		case "revision":
			rl.revisionPos = ext(k)
			rl.revision, _ = p.uint32(v, "revision", 1)
		case "headers":
			rl.headersPos = ext(k)
			rl.headers, _ = p.str(v, "headers")
		case "calendar":
			rl.calendarPos = ext(k)
			rl.calendar, _ = p.boolean(v, "calendar")
		case "time_zone":
			rl.timeZonePos = ext(k)
			rl.timeZone, _ = p.str(v, "time_zone")
		case "penalty":
			rl.penaltyPos = ext(k)
			rl.penalty = p.penalty(v)
		default:
			p.errorf(k, "unknown key %q in %s (expected unit, requests_per_unit, unlimited, name, replaces, unit_multiplier, algorithm, burst, failure_mode, revision, headers, calendar, time_zone, penalty)", key, what)
		}
	})
	if !ok {
		return nil
	}
	return rl
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
		var seen bool
		p.mapping(c, "a replaces entry", func(key string, k, v *yaml.Node) {
			switch key {
			case "name":
				seen = true
				ref.name, _ = p.str(v, "replaces.name")
			default:
				p.errorf(k, "unknown key %q in a replaces entry (expected name)", key)
			}
		})
		if c.Kind == yaml.MappingNode && !seen {
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
