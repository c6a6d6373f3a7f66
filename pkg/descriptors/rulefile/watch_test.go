package rulefile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
)

var testSecret = []byte("0123456789abcdef-test-secret")

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(name), 0o755))
	must(t, os.WriteFile(name, []byte(content), 0o644))
}

func rules(rpu string) string {
	return "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: " + rpu + "}\n"
}

var alice = []descriptors.Entry{{Key: "user", Value: "alice"}}

func limitOf(t testing.TB, s *descriptors.Snapshot) uint32 {
	t.Helper()
	m, ok := s.Match("d", alice)
	if !ok {
		t.Fatalf("no match")
	}
	return m.Rule.RequestsPerUnit
}

func TestNewWatcherNeedsAValidFirstLoad(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/r.yaml", "domain: d\ndescriptors: {}\n")
	var ce *descriptors.ConfigError
	if _, err := NewWatcher(dir, descriptors.Options{Secret: testSecret}, nil); !errors.As(err, &ce) {
		t.Fatalf("err = %v", err)
	}
}

// loggingWatcher watches dir after writing rules(limit) into it, and keeps
// the reload results its callback reports.
func loggingWatcher(t *testing.T, dir, limit string) (*Watcher, *[]descriptors.ReloadResult) {
	t.Helper()
	writeFile(t, dir+"/r.yaml", rules(limit))
	logged := new([]descriptors.ReloadResult)
	w, err := NewWatcher(dir, descriptors.Options{Secret: testSecret}, func(r descriptors.ReloadResult) { *logged = append(*logged, r) })
	if err != nil {
		t.Fatal(err)
	}
	return w, logged
}

func TestFailedReloadKeepsPreviousSnapshot(t *testing.T) {
	dir := t.TempDir()
	w, logged := loggingWatcher(t, dir, "5")
	first := w.Current()
	if l := w.Last(); !l.OK || l.Trigger != descriptors.TriggerInitial || l.Domains != 1 || l.Rules != 1 {
		t.Errorf("Last after NewWatcher = %+v", l)
	}
	writeFile(t, dir+"/r.yaml", rules("5")+"    bogus: 1\n")
	res := w.Reload()
	if res.OK || res.Result() != "failure" || len(res.Problems) != 1 || res.Problems[0].Line != 5 {
		t.Errorf("failed reload = %+v", res)
	}
	if w.Current() != first || limitOf(t, w.Current()) != 5 {
		t.Errorf("snapshot replaced by a failed reload")
	}
	if res.Fingerprint != first.Fingerprint() {
		t.Errorf("failed result does not describe the snapshot in service")
	}
	writeFile(t, dir+"/r.yaml", rules("9"))
	res = w.Reload()
	if !res.OK || res.Result() != "success" || limitOf(t, w.Current()) != 9 {
		t.Errorf("good reload = %+v", res)
	}
	if c := w.Counts(); c.Success != 1 || c.Failure != 1 {
		t.Errorf("Counts = %+v", c)
	}
	if len(*logged) != 2 || (*logged)[0].OK || !(*logged)[1].OK {
		t.Errorf("logged = %+v", *logged)
	}
	if w.Last().Time.Before((*logged)[0].Time) || !w.Last().OK {
		t.Errorf("Last = %+v", w.Last())
	}
}

// TestConcurrentMatchDuringSwaps runs lookups while snapshots are swapped
// (meaningful under -race).
func TestConcurrentMatchDuringSwaps(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/r.yaml", rules("1"))
	w, err := NewWatcher(dir, descriptors.Options{Secret: testSecret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ents := alice
			for !stop.Load() {
				s := w.Current()
				m, ok := s.Match("d", ents)
				if !ok || (m.Rule.RequestsPerUnit != 1 && m.Rule.RequestsPerUnit != 2) {
					errs <- "unexpected match"
					return
				}
				if _, ok := s.Override("d", ents, 3, descriptors.UnitMinute, 1); !ok {
					errs <- "override failed"
					return
				}
				_ = s.Domains()
			}
		}()
	}
	for i := 0; i < 40; i++ {
		writeFile(t, dir+"/r.yaml", rules([]string{"1", "2"}[i%2]))
		if r := w.Reload(); !r.OK {
			t.Fatalf("reload %d: %v", i, r.Err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// waitFor waits, up to 10s, for cond to hold, checking it after every load
// attempt of w.
func waitFor(t *testing.T, w *Watcher, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		next := w.NextAttempt()
		if cond() {
			return
		}
		select {
		case <-next:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// runWatcher runs w, with a quiet period of 20ms, until the test ends and
// returns once it watches the rule path.
func runWatcher(t *testing.T, w *Watcher) {
	t.Helper()
	w.debounce = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-w.Ready():
	case err := <-done:
		done <- err // for the cleanup
		t.Fatalf("Run returned before watching: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not start watching within 10s")
	}
}

// TestConfigMapSymlinkSwap reproduces the layout Kubernetes gives a mounted
// ConfigMap: rules.yaml -> ..data/rules.yaml, ..data -> ..<timestamp>, and an
// update that swaps ..data atomically.
func TestConfigMapSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/..2024_01_01_00_00_00.1/rules.yaml", rules("5"))
	must(t, os.Symlink("..2024_01_01_00_00_00.1", dir+"/..data"))
	must(t, os.Symlink("..data/rules.yaml", dir+"/rules.yaml"))
	var mu sync.Mutex
	var logged []descriptors.ReloadResult
	w, err := NewWatcher(dir, descriptors.Options{Secret: testSecret}, func(r descriptors.ReloadResult) {
		mu.Lock()
		logged = append(logged, r)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Current().Files(); len(got) != 1 || got[0] != filepath.Join(dir, "rules.yaml") {
		t.Fatalf("files = %v (dot entries must be skipped)", got)
	}
	runWatcher(t, w)

	writeFile(t, dir+"/..2024_01_02_00_00_00.2/rules.yaml", rules("7"))
	must(t, os.Symlink("..2024_01_02_00_00_00.2", dir+"/..data_tmp"))
	must(t, os.Rename(dir+"/..data_tmp", dir+"/..data"))
	must(t, os.RemoveAll(dir+"/..2024_01_01_00_00_00.1"))
	waitFor(t, w, "the swap to be loaded", func() bool { return limitOf(t, w.Current()) == 7 })

	// A broken update keeps the rules in service.
	writeFile(t, dir+"/..2024_01_03_00_00_00.3/rules.yaml", "domain: d\ndescriptors: 5\n")
	must(t, os.Symlink("..2024_01_03_00_00_00.3", dir+"/..data_tmp"))
	must(t, os.Rename(dir+"/..data_tmp", dir+"/..data"))
	waitFor(t, w, "the failed reload", func() bool { return !w.Last().OK })
	if limitOf(t, w.Current()) != 7 {
		t.Errorf("a failed reload replaced the rules")
	}
	if c := w.Counts(); c.Success < 1 || c.Failure < 1 {
		t.Errorf("Counts = %+v", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logged) == 0 || logged[len(logged)-1].OK || logged[len(logged)-1].Trigger != triggerWatch {
		t.Errorf("logged = %+v", logged)
	}
}

func TestWatchSingleFileEditedInPlace(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/r.yaml"
	writeFile(t, file, rules("5"))
	w, err := NewWatcher(file, descriptors.Options{Secret: testSecret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	// An unrelated file in the directory does not count as a reload.
	next := w.NextAttempt()
	writeFile(t, dir+"/notes.txt", "x")
	select {
	case <-next: // Run has checked the rule file after the change
	case <-time.After(10 * time.Second):
		t.Fatal("no check after a change in the watched directory")
	}
	if c := w.Counts(); c.Success+c.Failure != 0 {
		t.Errorf("unchanged content was reloaded: %+v", c)
	}
	writeFile(t, file, rules("6"))
	waitFor(t, w, "the edit to be loaded", func() bool { return limitOf(t, w.Current()) == 6 })
}

func TestWatchDirectoryReplaced(t *testing.T) {
	root := t.TempDir()
	dir := root + "/conf"
	writeFile(t, dir+"/r.yaml", rules("5"))
	w, err := NewWatcher(dir, descriptors.Options{Secret: testSecret}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runWatcher(t, w)
	writeFile(t, root+"/conf.new/r.yaml", rules("8"))
	must(t, os.RemoveAll(dir))
	must(t, os.Rename(root+"/conf.new", dir))
	waitFor(t, w, "the new directory to be loaded", func() bool { return limitOf(t, w.Current()) == 8 })
	// Edits inside the replacement directory are seen too.
	writeFile(t, dir+"/r.yaml", rules("9"))
	waitFor(t, w, "an edit in the new directory", func() bool { return limitOf(t, w.Current()) == 9 })
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestNextAttemptClosesAfterEachAttempt(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/r.yaml", rules("5"))
	var logged atomic.Int64
	w, err := NewWatcher(dir, descriptors.Options{Secret: testSecret}, func(descriptors.ReloadResult) { logged.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	next := w.NextAttempt()
	if closed(next) {
		t.Fatal("NextAttempt closed before any reload")
	}
	w.Reload()
	if !closed(next) {
		t.Fatal("NextAttempt still open after Reload")
	}
	if logged.Load() != 1 {
		t.Fatalf("the log function saw %d attempts when NextAttempt closed, want 1", logged.Load())
	}
	if closed(w.NextAttempt()) {
		t.Fatal("the channel for the attempt after Reload is already closed")
	}
	if closed(w.Ready()) {
		t.Fatal("Ready closed without Run")
	}
}

// TestReloadOverLimitKeepsPreviousRules: a reload whose set is over a
// limit is a failed reload.
func TestReloadOverLimitKeepsPreviousRules(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/r.yaml", rules("5"))
	w, err := NewWatcher(dir, descriptors.Options{Secret: testSecret, Limits: descriptors.Limits{MaxDescriptors: 4}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := w.Current()
	more := "domain: more\ndescriptors:\n"
	for i := range 4 {
		more += fmt.Sprintf("  - key: k\n    value: v%d\n    rate_limit: {unit: second, requests_per_unit: 1}\n", i)
	}
	writeFile(t, dir+"/more.yaml", more) // 1 + 4 descriptors
	res := w.Reload()
	if res.OK || w.Current() != first || limitOf(t, w.Current()) != 5 {
		t.Fatalf("reload over the limit: %+v; the previous rules must stay", res)
	}
	var le *descriptors.LimitError
	if !errors.As(res.Err, &le) || le.Total != 5 || le.Max != 4 {
		t.Errorf("err = %v (%T), want a *LimitError of 5 descriptors over 4", res.Err, res.Err)
	}
	if c := w.Counts(); c.Failure != 1 || c.Success != 0 {
		t.Errorf("Counts = %+v", c)
	}
}

// TestRevertAfterFailedReloadClearsTheFailure: files put back to the rules
// in service after a failed reload end the failure (nothing to swap).
func TestRevertAfterFailedReloadClearsTheFailure(t *testing.T) {
	dir := t.TempDir()
	w, logged := loggingWatcher(t, dir, "5")
	first := w.Current()
	writeFile(t, dir+"/r.yaml", rules("5")+"    bogus: 1\n")
	if res := w.reload(triggerWatch, true); res.OK {
		t.Fatalf("broken edit reloaded: %+v", res)
	}
	writeFile(t, dir+"/r.yaml", rules("5"))
	res := w.reload(triggerWatch, true)
	if !res.OK || res.Err != nil || len(res.Problems) != 0 || res.Fingerprint != first.Fingerprint() || !w.Last().OK {
		t.Errorf("revert: result %+v, Last %+v; want ok with the fingerprint in service", res, w.Last())
	}
	if w.Current() != first {
		t.Errorf("revert swapped the snapshot")
	}
	if c := w.Counts(); c.Success != 1 || c.Failure != 1 || len(*logged) != 2 || !(*logged)[1].OK {
		t.Errorf("Counts = %+v, logged %d", c, len(*logged))
	}
	// Unchanged content after a success is still neither counted nor logged.
	w.reload(triggerWatch, true)
	if c := w.Counts(); c.Success != 1 || len(*logged) != 2 {
		t.Errorf("an unchanged check was counted: %+v", c)
	}
}

// TestSetSecret: the rules in service are keyed with the new secret at
// once, even when the files no longer load, and so is every later reload.
func TestSetSecret(t *testing.T) {
	dir := t.TempDir()
	w, logged := loggingWatcher(t, dir, "5")
	other := []byte("another-secret-of-16+ bytes")
	subject := func(secret []byte, s *descriptors.Snapshot) (got, want [32]byte) {
		t.Helper()
		ref, err := descriptors.Load(dir, descriptors.Options{Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := s.Match("d", alice)
		r, _ := ref.Match("d", alice)
		return m.Subject, r.Subject
	}
	before, _ := w.Current().Match("d", alice)
	// The files are broken meanwhile: the new key does not depend on them.
	writeFile(t, dir+"/r.yaml", "domain: [broken")
	if err := w.SetSecret(other); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir+"/r.yaml", rules("5"))
	if got, want := subject(other, w.Current()); got != want || got == before.Subject {
		t.Fatalf("after SetSecret: subject %x, want the new secret's %x (the old one was %x)", got, want, before.Subject)
	}
	if len(*logged) != 0 || w.Counts() != (counts{}) {
		t.Errorf("SetSecret counted or reported a reload: %+v %+v", *logged, w.Counts())
	}
	writeFile(t, dir+"/r.yaml", rules("7"))
	if res := w.Reload(); !res.OK || limitOf(t, w.Current()) != 7 {
		t.Fatalf("reload after SetSecret: %+v", res)
	}
	if got, want := subject(other, w.Current()); got != want {
		t.Fatalf("a reload after SetSecret keyed the subjects with the old secret: %x, want %x", got, want)
	}
	if err := w.SetSecret([]byte("short")); !errors.Is(err, descriptors.ErrSecret) {
		t.Errorf("short secret: %v", err)
	}
}
