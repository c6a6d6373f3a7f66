package app

import (
	"fmt"
	"testing"
)

// serveArgsCase is one CheckServeArgs call and the error it must return.
type serveArgsCase struct {
	name string
	args []string
	env  map[string]string
	want string // "" = accepted
}

// checkServeArgsCases runs each case as a subtest.
func checkServeArgsCases(t *testing.T, cases []serveArgsCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckServeArgs(tc.args, func(k string) string { return tc.env[k] })
			if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
				t.Fatalf("CheckServeArgs(%q) = %v, want %q", tc.args, err, tc.want)
			}
		})
	}
}
