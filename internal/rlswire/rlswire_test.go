package rlswire

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

func TestRequestDecodes(t *testing.T) {
	var req rlsv3.RateLimitRequest
	if err := proto.Unmarshal(Request("envoy", Entry{"tenant", "acme"}, Entry{"route", "/api"}), &req); err != nil {
		t.Fatal(err)
	}
	if req.GetDomain() != "envoy" || len(req.GetDescriptors()) != 1 {
		t.Fatalf("decoded %v", &req)
	}
	es := req.GetDescriptors()[0].GetEntries()
	if len(es) != 2 || es[0].GetKey() != "tenant" || es[0].GetValue() != "acme" || es[1].GetKey() != "route" || es[1].GetValue() != "/api" {
		t.Fatalf("decoded entries %v", es)
	}
}
