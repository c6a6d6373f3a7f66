// Package descriptors loads envoyproxy/ratelimit rule files (with the
// envoy-rls extensions), or the same rules given as values (Document, which
// the xDS source in package xds fills), compiles them into an immutable
// Snapshot, matches request descriptors against it and pseudonymizes the
// matched subjects.
//
// A Snapshot is immutable and safe for concurrent use; the rule sources
// (package rulefile for files, package xds for an xDS server) swap
// snapshots atomically and describe each load attempt with a ReloadResult.
// LoadChanged lets a source skip compiling files that did not change. The
// package never logs: problems are returned (as *ConfigError, with file,
// line and column, or a Document's field).
//
// Subjects are HMAC-SHA256(secret, canonical encoding of the policy ID and
// the matched entries); raw descriptor values never leave this package
// except inside that digest. A store builds its keys from the policy and the
// digest (the Redis store: redis.StorageKey).
//
// See docs/config.md for the file format.
package descriptors
