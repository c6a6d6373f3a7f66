-- rate-sliding-counter-v1.lua: sliding-window counter, version 1
-- (docs/algorithms.md). Approximate, conservative: weights round up.
--
-- KEYS[1]  the state hash (limiter.StorageKey)
-- ARGV[1]  policy ID            [a-z0-9._:/-]{1,128}
-- ARGV[2]  policy revision      1..2^32-1
-- ARGV[3]  limit                0..(2^53-1)/1e6
-- ARGV[4]  window ms            1..(2^53-1)/1e6
-- ARGV[5]  max cost             0..limit
-- ARGV[6]  cleanup grace ms     0..ten years
-- ARGV[7]  max clock regression ms  0..ten years
-- ARGV[8]  cost                 1..max cost
-- Any other argument (count, syntax, range) replies INVALID.
--
-- Reply: an array of exactly seven bulk strings
--   1 status: ALLOWED | DENIED | CLOCK_UNSAFE | STATE_INCOMPATIBLE | INVALID
--   2 serverNowMillis     Redis TIME, read once
--   3 effectiveNowMillis  serverNow, or the stored last-observed time when the
--                         clock stepped back by at most the allowed regression
--   4 limit               the policy limit
--   5 remaining           after this request (0 for the failure statuses)
--   6 retryAfterMillis    0 unless DENIED
--   7 resetAtMillis       when the estimate returns to 0 without traffic
-- Fields 2-7 are canonical decimal integers in [0, 2^53-1], formatted with
-- string.format('%d') after an exactness check: strings, not RESP integers,
-- so that a non-integer can never be truncated silently on the way out (an
-- inexact value raises an error instead, which the store treats as
-- incompatible). STATE_INCOMPATIBLE and CLOCK_UNSAFE reply
-- (serverNow, serverNow, limit, 0, 0, 0); INVALID replies
-- (serverNow, serverNow, 0, 0, 0, 0).
--
-- State: one hash, fields schema (1), alg, policy, rev, last (last-observed
-- ms), a, b, c (see docs/algorithms.md). Only an ALLOWED request writes it:
-- one HSET (every field for a new hash, otherwise last, b and whichever of a
-- and c changed), then PEXPIRE. Every other status writes nothing.
-- Runs on Redis 7.0+ and Valkey (script effects replication; TIME before
-- writes is allowed).
--
-- The algorithm and the shared steps are fragments (pkg/lua/fragments),
-- blocks assembled in by pkg/lua at the include lines below: the same text
-- runs in rate-batch-v1.lua, so each algorithm has one source.

-- #include prelude.lua
-- #include decimal.lua
-- #include v1-reply.lua
-- #include time.lua

local key = KEYS[1]
local alg = 'sliding_window'
local policy = policyID(ARGV[1])
local rev = uint(ARGV[2], 1, 4294967295)
local limit = uint(ARGV[3], 0, MAX)
local p2 = uint(ARGV[4], 1, MAX) -- the window
local p3 = 0
local maxCost = uint(ARGV[5], 0, MAX)
local grace = uint(ARGV[6], 0, MAX_DURATION)
local maxRegression = uint(ARGV[7], 0, MAX_DURATION)
local cost = uint(ARGV[8], 1, MAX)
local valid = #KEYS == 1 and #ARGV == 8 and policy and rev and limit and p2 and maxCost and grace
  and maxRegression and cost and maxCost <= limit and cost <= maxCost
-- #include valid.lua
if not valid then
  return reply('INVALID', serverNow, serverNow, 0, 0, 0, 0)
end

local st, stLast, stA, stB, stC
-- #include load.lua
if st == false then
  return reply('STATE_INCOMPATIBLE', serverNow, serverNow, limit, 0, 0, 0)
end
local now
-- #include clock.lua
if not now then
  return reply('CLOCK_UNSAFE', serverNow, serverNow, limit, 0, 0, 0)
end
local window = p2
local allowed, a, b, c, ttl, remaining, retry, resetAt, held, heldReset
-- #include sliding-window.lua
if allowed then
  local fresh, hashA, hashC, nowS = st == nil, stA, stC, false
-- #include store.lua
  return reply('ALLOWED', serverNow, now, limit, remaining, 0, resetAt)
end
return reply('DENIED', serverNow, now, limit, remaining, retry, resetAt)
