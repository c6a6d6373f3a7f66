package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/polltest"
)

// TestDenialsCountAndBound: the binary's GET /v1/denials, as
// docs/admin-api.md describes it: after 6 denials "kept" is 6 (the count
// held) and "capacity" 100 (the most held); n=500 is 400 with the range,
// with the audit sink on and off.
func TestDenialsCountAndBound(t *testing.T) {
	tokens := tokenFile(t)
	r := startReplica(t, "denials", replicaConfig{Rules: rulesDir(t, hourlyRules(3, "user")), Secret: secretFile(t),
		Args: []string{"--admin-token-file", tokens, "--audit-sink", "stdout"}})
	r.checkAdmits(t, entry{"user", unique("rawval")}, 3, 9)
	var ans struct {
		Sink     string            `json:"sink"`
		Denials  []json.RawMessage `json:"denials"`
		Kept     int               `json:"kept"`
		Capacity int               `json:"capacity"`
	}
	// The sink takes the events off the request path.
	polltest.Eventually(t, 5*time.Second, 50*time.Millisecond, "6 denials kept", func() error {
		code, body, err := r.adminDo(http.MethodGet, "/v1/denials", adminToken)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			t.Fatalf("/v1/denials: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &ans); err != nil {
			t.Fatalf("/v1/denials: %v\n%s", err, body)
		}
		if ans.Kept != 6 {
			return fmt.Errorf("not 6 kept yet: %s", body)
		}
		return nil
	})
	if ans.Sink != "stdout" || ans.Capacity != 100 || len(ans.Denials) != 6 {
		t.Fatalf("/v1/denials after 6 denials: sink %q, capacity %d, %d denials; want stdout, 100, 6", ans.Sink, ans.Capacity, len(ans.Denials))
	}
	off := startReplica(t, "denials-off", replicaConfig{Rules: rulesDir(t, hourlyRules(3, "user")), Secret: secretFile(t),
		Args: []string{"--admin-token-file", tokens}})
	for _, rep := range []*replica{r, off} {
		code, body, err := rep.adminDo(http.MethodGet, "/v1/denials?n=500", adminToken)
		if err != nil || code != http.StatusBadRequest || !strings.Contains(body, "n must be an integer from 1 to 100") {
			t.Errorf("%s: /v1/denials?n=500: %d %q %v, want 400", rep.name, code, body, err)
		}
	}
}
