package audit

import (
	"encoding/json"
	"strconv"
	"strings"
)

// KindAdmin: one call of the admin API that reads or changes limit state
// (explain, counters read, reset).
const KindAdmin = "admin"

// Admin is one admin API call; an Event carrying one is an admin record
// (KindAdmin) of Domain and PolicyID at Time. It holds no raw descriptor
// value: policies, counts, the token's name and the caller's address.
type Admin struct {
	// Action is the call: explain, counters-read or counters-reset.
	Action string
	// Token is the name of the token the call carried.
	Token string
	// Client is the caller's address (host:port).
	Client string
	// Status is the HTTP status answered.
	Status int
	// Policies are the policies the call matched or reset, when more than
	// one (Event.PolicyID holds a single one).
	Policies []string
	// Descriptors is how many descriptors the call asked about (the
	// values it looked up); Matched how many matched a limited rule.
	Descriptors, Matched int
	// Deleted and Scanned are a reset's stored states deleted and looked
	// at; Skipped the keys a policy reset found that are not states (left
	// alone); Complete says whether a policy reset looked at every state.
	Deleted, Scanned, Skipped int
	Complete                  *bool
}

// AdminRecord is an admin record as written (JSON lines).
type AdminRecord struct {
	Kind        string   `json:"kind"`
	Time        string   `json:"time"`
	Action      string   `json:"action"`
	Token       string   `json:"token"`
	Client      string   `json:"client"`
	Status      int      `json:"status"`
	Domain      string   `json:"domain,omitempty"`
	PolicyID    string   `json:"policy_id,omitempty"`
	Policies    []string `json:"policies,omitempty"`
	Descriptors int      `json:"descriptors"`
	Matched     int      `json:"matched"`
	Deleted     int      `json:"deleted"`
	Scanned     int      `json:"scanned,omitempty"`
	Skipped     int      `json:"skipped,omitempty"`
	Complete    *bool    `json:"complete,omitempty"`
}

func (e *Event) adminRecord() *AdminRecord {
	a := e.Admin
	return &AdminRecord{
		Kind: KindAdmin, Time: e.Time.UTC().Format(timeFormat), Action: a.Action, Token: a.Token, Client: a.Client,
		Status: a.Status, Domain: e.Domain, PolicyID: e.PolicyID, Policies: a.Policies, Descriptors: a.Descriptors,
		Matched: a.Matched, Deleted: a.Deleted, Scanned: a.Scanned, Skipped: a.Skipped, Complete: a.Complete,
	}
}

// OfferAdmin queues an admin record (e.Admin set): never sampled, not
// among Recent, dropped and counted like a denial when the queue is full.
// It never blocks.
func (s *Sink) OfferAdmin(e Event) {
	if e.Admin == nil {
		return
	}
	s.enqueue(e)
}

func marshalAdmin(r *AdminRecord) ([]byte, error) { return json.Marshal(r) }

// fields are an admin record's stream fields after kind and time.
func (r *AdminRecord) fields() [][2]string {
	f := [][2]string{
		{"action", r.Action}, {"token", r.Token}, {"client", r.Client}, {"status", strconv.Itoa(r.Status)},
		{"domain", r.Domain}, {"policy_id", r.PolicyID},
	}
	if len(r.Policies) > 0 {
		f = append(f, [2]string{"policies", strings.Join(r.Policies, ",")})
	}
	f = append(f, [][2]string{
		{"descriptors", strconv.Itoa(r.Descriptors)}, {"matched", strconv.Itoa(r.Matched)}, {"deleted", strconv.Itoa(r.Deleted)},
	}...)
	if r.Scanned > 0 {
		f = append(f, [2]string{"scanned", strconv.Itoa(r.Scanned)})
	}
	if r.Skipped > 0 {
		f = append(f, [2]string{"skipped", strconv.Itoa(r.Skipped)})
	}
	if r.Complete != nil {
		f = append(f, [2]string{"complete", strconv.FormatBool(*r.Complete)})
	}
	return f
}
