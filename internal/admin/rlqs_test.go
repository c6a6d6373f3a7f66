package admin

import (
	"net/http"
	"strings"
	"testing"
)

// TestRLQSExplain: POST /v1/rlqs/explain explains an RLQS bucket as the
// descriptor its entries make in the rule tree's order: the same rule,
// subject digest and state as /v1/explain's, a bucket that matches no
// rule with the reason, and bad bodies refused; no request value in the
// answers.
func TestRLQSExplain(t *testing.T) {
	h := newHarness(t)
	const user = "rawval-bucket-user"
	h.hits("user", user, 2, 2)
	var byDesc, byBucket ExplainAnswer
	h.decode("POST", "/v1/explain", explainBody("user", user), &byDesc)
	h.decode("POST", "/v1/rlqs/explain", `{"domain":"app","buckets":[{"user":"`+user+`"},{"user":"`+user+`","extra":"rawval-x"}]}`, &byBucket)
	if len(byBucket.Descriptors) != 2 {
		t.Fatalf("answer %+v", byBucket)
	}
	d, want := byBucket.Descriptors[0], byDesc.Descriptors[0]
	if !d.Matched || d.PolicyID != want.PolicyID || d.SubjectDigest != want.SubjectDigest || len(d.Limits) != 1 ||
		d.Limits[0].Remaining == nil || *d.Limits[0].Remaining != 3 {
		t.Fatalf("the bucket {user}: %+v, want the descriptor's %+v with 3 remaining", d, want)
	}
	if left := byBucket.Descriptors[1]; left.Matched || !strings.Contains(left.Reason, `"extra"`) {
		t.Fatalf("a bucket with a key left over: %+v", left)
	}
	for _, body := range []string{`{}`, `{"domain":"app","buckets":[]}`, `{"domain":"app","buckets":[{}]}`, `{"domain":"app","buckets":[{"":"v"}]}`, `{"domain":"app","bucket":{"user":"v"}}`, `not json`} {
		if code, _ := h.do("POST", "/v1/rlqs/explain", body); code != http.StatusBadRequest {
			t.Errorf("body %s: %d, want 400", body, code)
		}
	}
	h.noRawValue(user)
}
