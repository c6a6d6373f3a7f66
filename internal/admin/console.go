package admin

import (
	"cmp"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// The console is a static page: the files below, embedded, with no data in
// them. The page asks for an admin token, keeps it in the tab's
// sessionStorage and calls the /v1 API with Authorization: Bearer, like any
// other client. No cookie is set, so a page of another site cannot make the
// browser call the API with the operator's credentials (no CSRF), and the
// Content-Security-Policy allows only these files' scripts and styles.
//
//go:embed ui
var consoleFiles embed.FS

// consoleCSP allows the console's own script, style and API calls only.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// consoleAsset is one embedded file with its content type and ETag.
type consoleAsset struct {
	body        []byte
	contentType string
	etag        string
}

// consoleAssets reads the embedded files once.
func consoleAssets() (map[string]consoleAsset, error) {
	types := map[string]string{".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
	out := map[string]consoleAsset{}
	err := fs.WalkDir(consoleFiles, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := consoleFiles.ReadFile(p)
		if err != nil {
			return err
		}
		ct, ok := types[path.Ext(p)]
		if !ok {
			return fmt.Errorf("console: %s: no content type for this extension", p)
		}
		sum := sha256.Sum256(b)
		out[path.Base(p)] = consoleAsset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return out, err
}

// handleConsole registers /ui (the page) and /ui/{file} when the admin API
// is on; without Config.Auth they are 404 like the API.
func (s *Server) handleConsole(mux *http.ServeMux) {
	if s.cfg.Auth == nil {
		return
	}
	assets, err := consoleAssets()
	if err != nil {
		s.cfg.Log.Error("console: the embedded files do not load; /ui is off", zap.Error(err))
		return
	}
	serve := func(w http.ResponseWriter, r *http.Request, name string) {
		a, ok := assets[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// Revalidated at each load: a new binary's files are never mixed
		// with an old page.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		if r.Header.Get("If-None-Match") == a.etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("Content-Type", a.contentType)
		_, _ = w.Write(a.body)
	}
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { serve(w, r, "index.html") })
	mux.HandleFunc("GET /ui/{file}", func(w http.ResponseWriter, r *http.Request) { serve(w, r, r.PathValue("file")) })
}

// statsAnswer is /v1/stats' answer: the process's decision counters per
// policy, cumulative since it started; a client computes rates from two
// answers and their times.
type statsAnswer struct {
	Time     time.Time    `json:"time"`
	Policies []statsEntry `json:"policies"`
}

type statsEntry struct {
	Domain        string  `json:"domain"`
	PolicyID      string  `json:"policy_id"`
	Decisions     float64 `json:"decisions"`
	Denials       float64 `json:"denials"`
	ShadowDenials float64 `json:"shadow_denials"`
	Hits          float64 `json:"hits"`
}

// handleStats answers GET /v1/stats from envoy_rls_decisions_total and
// envoy_rls_hits_total: the same series, no new ones.
func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	mfs, err := s.cfg.Registry.Gather()
	if err != nil {
		writeAPIError(w, http.StatusInternalServerError, "reading the metrics: "+err.Error())
		return
	}
	byKey := map[[2]string]*statsEntry{}
	entry := func(domain, policy string) *statsEntry {
		k := [2]string{domain, policy}
		if e := byKey[k]; e != nil {
			return e
		}
		e := &statsEntry{Domain: domain, PolicyID: policy}
		byKey[k] = e
		return e
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case rls.MetricsNamespace + "_decisions_total", rls.MetricsNamespace + "_hits_total":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			e, v := entry(labels["domain"], labels["policy"]), m.GetCounter().GetValue()
			if mf.GetName() == rls.MetricsNamespace+"_hits_total" {
				e.Hits += v
				continue
			}
			e.Decisions += v
			switch labels["result"] {
			case rls.ResultOverLimit:
				e.Denials += v
			case rls.ResultShadowOverLimit:
				e.ShadowDenials += v
			}
		}
	}
	ans := statsAnswer{Time: time.Now().UTC(), Policies: make([]statsEntry, 0, len(byKey))}
	for _, e := range byKey {
		ans.Policies = append(ans.Policies, *e)
	}
	slices.SortFunc(ans.Policies, func(a, b statsEntry) int {
		return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.PolicyID, b.PolicyID))
	})
	writeAPIJSON(w, http.StatusOK, ans)
}
