package admin

import (
	"fmt"
	"net/http"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// maxCPUProfile bounds /debug/pprof/profile?seconds=N: a longer N is
// refused (400), so that a profile always ends within the admin server's
// writeTimeout.
const maxCPUProfile = 60 * time.Second

// registerPprof serves the runtime profiles on mux, in the formats of
// net/http/pprof that `go tool pprof` reads:
//
//	/debug/pprof/                  index of the named profiles
//	/debug/pprof/profile?seconds=N CPU profile over N seconds (default 30)
//	/debug/pprof/<name>?debug=N    heap, allocs, goroutine, mutex, block, threadcreate
//
// It is written on runtime/pprof rather than imported from net/http/pprof
// because that package's init registers its handlers on
// http.DefaultServeMux for the whole process. guard wraps each handler
// (Server.guard: behind the admin token when there is one).
func registerPprof(mux *http.ServeMux, guard func(string, http.HandlerFunc) http.HandlerFunc) {
	mux.HandleFunc("GET /debug/pprof/profile", guard("pprof", cpuProfile))
	mux.HandleFunc("GET /debug/pprof/{name}", guard("pprof", namedProfile))
	mux.HandleFunc("GET /debug/pprof/{$}", guard("pprof", func(w http.ResponseWriter, _ *http.Request) {
		var b strings.Builder
		b.WriteString("profiles (add ?debug=1 for text):\nprofile?seconds=30\n")
		for _, p := range pprof.Profiles() {
			fmt.Fprintf(&b, "%s %d\n", p.Name(), p.Count())
		}
		writeText(w, http.StatusOK, b.String())
	}))
}

func cpuProfile(w http.ResponseWriter, r *http.Request) {
	d := 30 * time.Second
	if v := r.URL.Query().Get("seconds"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || time.Duration(n)*time.Second > maxCPUProfile {
			writeText(w, http.StatusBadRequest, fmt.Sprintf("seconds must be 1..%d", int(maxCPUProfile/time.Second)))
			return
		}
		d = time.Duration(n) * time.Second
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if err := pprof.StartCPUProfile(w); err != nil {
		// Another CPU profile is running.
		writeText(w, http.StatusConflict, "cannot start a CPU profile: "+err.Error())
		return
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
	}
	pprof.StopCPUProfile()
}

func namedProfile(w http.ResponseWriter, r *http.Request) {
	p := pprof.Lookup(r.PathValue("name"))
	if p == nil {
		writeText(w, http.StatusNotFound, "no such profile")
		return
	}
	debug, _ := strconv.Atoi(r.URL.Query().Get("debug"))
	if debug != 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	_ = p.WriteTo(w, debug)
}
