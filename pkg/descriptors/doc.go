// Package descriptors loads envoyproxy/ratelimit rule files (with the
// envoy-rls extensions), or the same rules given as values (Document, which
// the xDS source in package xds fills), compiles them into an immutable
// Snapshot, matches request descriptors against it and pseudonymizes the
// matched subjects.
//
// A Snapshot is safe for concurrent use; the Watcher swaps snapshots
// atomically when the files change or Reload is called, and keeps the
// previous snapshot when a reload fails. The package never logs: problems
// are returned (as *ConfigError, with file, line and column, or a
// Document's field) and reload results are handed to the caller's callback.
//
// Subjects are HMAC-SHA256(secret, canonical encoding of the policy ID and
// the matched entries); raw descriptor values never leave this package
// except inside that digest. A store builds its keys from the policy and the
// digest (the Redis store: redis.StorageKey).
//
// See docs/config.md for the file format.
package descriptors
