// Package rulefile serves the rules of a rule file or directory: it loads
// them with package descriptors, watches the path and swaps in a newly
// compiled Snapshot when the files change or when asked (SIGHUP), keeping
// the previous one when a reload fails.
package rulefile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/descriptors"
	"github.com/fsnotify/fsnotify"
)

// Reload triggers, besides descriptors.TriggerInitial (the first load, in
// NewWatcher).
const (
	triggerManual = "manual" // Reload (SIGHUP)
	triggerWatch  = "watch"  // a file-system change seen by Run
)

// quietPeriod is how long Run waits after the last file event before it
// reloads.
const quietPeriod = 150 * time.Millisecond

// counts counts reloads (the first load excluded) by result.
type counts struct {
	Success uint64
	Failure uint64
}

// Watcher keeps the current Snapshot of a rule path and replaces it when the
// files change (Run) or when asked (Reload). A reload that fails keeps the
// previous snapshot. All methods are safe for concurrent use.
type Watcher struct {
	path     string
	opts     descriptors.Options
	log      func(descriptors.ReloadResult)
	debounce time.Duration // quietPeriod; shorter in tests

	cur  atomic.Pointer[descriptors.Snapshot]
	last atomic.Pointer[descriptors.ReloadResult]
	mu   sync.Mutex // serializes loads

	success atomic.Uint64
	failure atomic.Uint64

	ready     chan struct{} // closed once Run watches the path
	readyOnce sync.Once
	attemptMu sync.Mutex
	attempt   chan struct{} // closed, then replaced, when a load attempt ends
}

// NewWatcher loads path (a file or a directory, as descriptors.Load) and
// returns a Watcher serving it. The first load must succeed. log, if not
// nil, is called after every later reload attempt (not for the first load),
// from the goroutine that made it; it must not block for long.
func NewWatcher(path string, opts descriptors.Options, log func(descriptors.ReloadResult)) (*Watcher, error) {
	s, err := descriptors.Load(path, opts)
	if err != nil {
		return nil, err
	}
	w := &Watcher{path: path, opts: opts, log: log, debounce: quietPeriod, ready: make(chan struct{}), attempt: make(chan struct{})}
	w.opts.Secret = slices.Clone(opts.Secret)
	w.cur.Store(s)
	res := descriptors.NewReloadResult(descriptors.TriggerInitial, s, nil)
	w.last.Store(&res)
	return w, nil
}

// Current returns the snapshot in service (never nil).
func (w *Watcher) Current() *descriptors.Snapshot { return w.cur.Load() }

// Last returns the most recent load attempt.
func (w *Watcher) Last() descriptors.ReloadResult { return *w.last.Load() }

// Counts returns the number of reloads by result since NewWatcher.
func (w *Watcher) Counts() counts {
	return counts{Success: w.success.Load(), Failure: w.failure.Load()}
}

// Ready returns a channel that is closed once Run watches the rule path:
// a change made after that is seen. It stays open if Run is never called or
// cannot set up its watch.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// NextAttempt returns a channel that is closed when the next load attempt
// ends (one already in progress counts): a Reload, or a check by Run after a
// change, including a check that finds the content unchanged and so is
// neither counted nor logged. The log function and the counters have seen
// the attempt by then. Only one such channel exists at a time.
func (w *Watcher) NextAttempt() <-chan struct{} {
	w.attemptMu.Lock()
	defer w.attemptMu.Unlock()
	return w.attempt
}

// endAttempt wakes the callers of NextAttempt.
func (w *Watcher) endAttempt() {
	w.attemptMu.Lock()
	defer w.attemptMu.Unlock()
	close(w.attempt)
	w.attempt = make(chan struct{})
}

// SetSecret keys the subjects with secret from now on: the snapshot in
// service is replaced by the same rules keyed with it (no file is read, so
// it cannot fail on files changed meanwhile), and every later load compiles
// with it. It neither counts nor reports a reload.
func (w *Watcher) SetSecret(secret []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, err := w.cur.Load().WithSecret(secret)
	if err != nil {
		return err
	}
	w.opts.Secret = slices.Clone(secret)
	w.cur.Store(s)
	return nil
}

// Reload loads the rule files again and swaps the snapshot on success
// (SIGHUP). It always counts and reports, even when nothing changed.
func (w *Watcher) Reload() descriptors.ReloadResult {
	return w.reload(triggerManual, false)
}

// reload loads and swaps. With onlyIfChanged, input identical to the
// snapshot in service is neither swapped, counted nor reported.
func (w *Watcher) reload(trigger string, onlyIfChanged bool) descriptors.ReloadResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.endAttempt()
	s := w.cur.Load()
	var base *descriptors.Snapshot // nil: compiled even when unchanged
	if onlyIfChanged {
		base = s
	}
	next, changed, err := descriptors.LoadChanged(w.path, w.opts, base)
	if err == nil && !changed {
		if last := w.last.Load(); last.OK {
			return *last
		}
		// The files are back to the rules in service after a failed
		// reload: nothing to swap, but the failure is over.
	} else if err == nil {
		s = next
	}
	res := descriptors.NewReloadResult(trigger, s, err)
	if err != nil {
		w.failure.Add(1)
	} else {
		w.cur.Store(s)
		w.success.Add(1)
	}
	w.last.Store(&res)
	if w.log != nil {
		w.log(res)
	}
	return res
}

// rewatchInterval is how often Run tries to watch the directory again after
// it disappeared.
const rewatchInterval = time.Second

// Run watches the rule path until ctx is done and reloads, after a quiet
// period (quietPeriod), whenever something changes. It watches the
// directory (the file's directory when the path is a file), so Kubernetes
// ConfigMap updates, which swap a `..data` symbolic link, are seen; when the
// path is a directory its parent is watched too, so that replacing the
// directory (or a symbolic link to it) is seen. Identical content is not
// reloaded. Run returns nil when ctx ends, or an error when the watch cannot
// be set up.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rulefile: watching %s: %w", w.path, err)
	}
	defer fw.Close()
	dir, isDir := w.path, true
	if fi, err := os.Stat(w.path); err != nil || !fi.IsDir() {
		dir, isDir = filepath.Dir(w.path), false
	}
	dir = filepath.Clean(dir)
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("rulefile: watching %s: %w", dir, err)
	}
	parent := filepath.Dir(dir)
	if isDir && parent != dir {
		// Best effort: without it, edits inside the directory are still seen.
		_ = fw.Add(parent)
	}
	w.readyOnce.Do(func() { close(w.ready) })
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	rewatch := time.NewTicker(rewatchInterval)
	defer rewatch.Stop()
	watching := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("rulefile: file watcher closed")
			}
			name := filepath.Clean(ev.Name)
			if isDir && filepath.Dir(name) == parent && name != dir {
				continue // an unrelated entry of the parent directory
			}
			if name == dir && ev.Has(fsnotify.Remove|fsnotify.Rename|fsnotify.Create) {
				// The directory itself was replaced: watch the new one.
				_ = fw.Remove(dir)
				watching = fw.Add(dir) == nil
			}
			debounce.Reset(w.debounce)
		case _, ok := <-fw.Errors:
			if !ok {
				return errors.New("rulefile: file watcher closed")
			}
			// An overflow loses events: reload to be safe.
			debounce.Reset(w.debounce)
		case <-rewatch.C:
			if !watching {
				if fw.Add(dir) == nil {
					watching = true
					debounce.Reset(w.debounce)
				}
			}
		case <-debounce.C:
			w.reload(triggerWatch, true)
		}
	}
}
