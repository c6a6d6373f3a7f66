package loadgen

import (
	"errors"
	"slices"
	"testing"
)

func TestParseDescriptors(t *testing.T) {
	tests := []struct {
		in      string
		want    []DescriptorSpec
		wantErr bool
	}{
		{in: "remote_address", want: []DescriptorSpec{{{Key: "remote_address"}}}},
		{in: "tenant,user", want: []DescriptorSpec{{{Key: "tenant"}, {Key: "user"}}}},
		{in: "generic_key=api, remote_address ; tenant,user", want: []DescriptorSpec{
			{{Key: "generic_key", Value: "api", Fixed: true}, {Key: "remote_address"}},
			{{Key: "tenant"}, {Key: "user"}},
		}},
		{in: "a;;b;", want: []DescriptorSpec{{{Key: "a"}}, {{Key: "b"}}}},
		{in: "", wantErr: true},
		{in: " ; ", wantErr: true},
		{in: "a,,b", wantErr: true},
		{in: "=v", wantErr: true},
	}
	for _, tc := range tests {
		got, err := ParseDescriptors(tc.in)
		if tc.wantErr {
			if !errors.Is(err, ErrBadDescriptors) {
				t.Errorf("ParseDescriptors(%q) err = %v, want ErrBadDescriptors", tc.in, err)
			}
			continue
		}
		if err != nil || !slices.EqualFunc(got, tc.want, func(a, b DescriptorSpec) bool { return slices.Equal(a, b) }) {
			t.Errorf("ParseDescriptors(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			continue
		}
		again, err := ParseDescriptors(FormatDescriptors(got))
		if err != nil || !slices.EqualFunc(again, got, func(a, b DescriptorSpec) bool { return slices.Equal(a, b) }) {
			t.Errorf("round trip of %q gave %v, %v", tc.in, again, err)
		}
	}
}

func TestRequestTemplateSetsOnlySubjectEntries(t *testing.T) {
	specs, err := ParseDescriptors("generic_key=api,remote_address;tenant,user")
	if err != nil {
		t.Fatal(err)
	}
	tmpl := newRequestTemplate("bench", specs, 3)
	names := SubjectNames(10)
	if names[7] != "s-7" {
		t.Fatalf("SubjectNames: %q", names[7])
	}
	req := tmpl.set(names[7])
	if req.GetDomain() != "bench" || req.GetHitsAddend() != 3 || len(req.GetDescriptors()) != 2 {
		t.Fatalf("request: %v", req)
	}
	var got []string
	for _, d := range req.GetDescriptors() {
		for _, e := range d.GetEntries() {
			got = append(got, e.GetKey()+"="+e.GetValue())
		}
	}
	want := []string{"generic_key=api", "remote_address=s-7", "tenant=s-7", "user=s-7"}
	if !slices.Equal(got, want) {
		t.Fatalf("entries = %v, want %v", got, want)
	}
	if tmpl.set(names[2]).GetDescriptors()[0].GetEntries()[1].GetValue() != "s-2" {
		t.Fatal("set did not replace the subject value")
	}
}
