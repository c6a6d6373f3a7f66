// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3): proxies decide locally from a quota
// the service assigns per bucket and report their usage every few
// seconds. A bucket (BucketId, an unordered map) selects a rule and a
// subject of the same rule set the RLS path serves
// (descriptors.Snapshot.MatchBucket); the usage the proxies report is
// charged to the same state the RLS path decides from, so both share one
// budget. Each tick, the rate the state still allows (capacity) is divided
// among the proxies reporting the bucket, on every replica (Exchange), by
// max-min fairness over their demands (fairShares), and each proxy is sent
// a token bucket of its share (strategyFor) with a time to live.
package rlqs
