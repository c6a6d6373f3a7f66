package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			_, _ = io.WriteString(w, "ready")
		case "/slow":
			// Never answers: holds until the client gives up (or the test ends).
			select {
			case <-r.Context().Done():
			case <-release:
			}
		default:
			http.Error(w, "not ready: store unreachable", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	defer close(release)
	cases := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"ready", []string{srv.URL + "/readyz"}, ""},
		{"503 fails with the body", []string{srv.URL + "/down"}, "store unreachable"},
		{"timeout", []string{"-timeout", "50ms", srv.URL + "/slow"}, "deadline exceeded"},
		{"refused", []string{"http://127.0.0.1:1/readyz"}, "refused"},
		{"no URL", nil, "usage"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, io.Discard)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("run: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("run: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
