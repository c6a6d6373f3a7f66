-- rate-fixed-window-v1.lua: fixed window, version 1 (docs/algorithms.md).
--
-- KEYS[1]  the state hash (limiter.StorageKey)
-- ARGV[1]  policy ID            [a-z0-9._:/-]{1,128}
-- ARGV[2]  policy revision      1..2^32-1
-- ARGV[3]  limit                0..2^53-1
-- ARGV[4]  window ms            1..ten years
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
--   7 resetAtMillis       the end of the current window
-- Fields 2-7 are canonical decimal integers in [0, 2^53-1], formatted with
-- string.format('%d') after an exactness check: strings, not RESP integers,
-- so that a non-integer can never be truncated silently on the way out (an
-- inexact value raises an error instead, which the store treats as
-- incompatible). STATE_INCOMPATIBLE and CLOCK_UNSAFE reply
-- (serverNow, serverNow, limit, 0, 0, 0); INVALID replies
-- (serverNow, serverNow, 0, 0, 0, 0).
--
-- State: one hash, fields schema (1), alg, policy, rev, last (last-observed
-- ms), a, b, c (see docs/algorithms.md). Only an ALLOWED request writes it,
-- all fields at once, then sets PEXPIRE. Every other status writes nothing.
-- Runs on Redis 7.0+ and Valkey (script effects replication; TIME before
-- writes is allowed).

-- Shared prelude (identical in every v1 program; a test checks that).
local MAX = 9007199254740991 -- 2^53-1: every number stays an exact integer
local MAX_DURATION = 316224000000 -- ten years in ms, as limiter.NewPolicy
local SCHEMA = '1'

-- uint parses a canonical decimal integer in [lo, hi], or returns nil.
local function uint(s, lo, hi)
  if type(s) ~= 'string' or #s == 0 or #s > 16 or not string.find(s, '^[0-9]+$') then
    return nil
  end
  if #s > 1 and string.byte(s, 1) == 48 then -- no leading zeros
    return nil
  end
  local n = tonumber(s)
  if n == nil or n < lo or n > hi then
    return nil
  end
  return n
end

-- dec formats an exact integer; anything else is a program bug and raises.
local function dec(n)
  if type(n) ~= 'number' or n ~= n or n < 0 or n > MAX or n ~= math.floor(n) then
    error('envoy-rls: inexact reply value')
  end
  return string.format('%d', n)
end

-- Exact integer division of non-negative integers below 2^53: C fmod is
-- exact, so a - r is an exact multiple of b and (a - r) / b an exact integer.
-- (math.floor(a / b) can be off by one, and a % b is computed from it.)
local function idiv(a, b)
  return (a - math.fmod(a, b)) / b
end

local function imod(a, b)
  return math.fmod(a, b)
end

-- ceil(a, b) for a >= 0, b > 0, without an a + b - 1 intermediate.
local function ceildiv(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r ~= 0 then
    q = q + 1
  end
  return q
end

local function reply(status, serverNow, effectiveNow, limit, remaining, retryAfter, resetAt)
  return { status, dec(serverNow), dec(effectiveNow), dec(limit), dec(remaining), dec(retryAfter), dec(resetAt) }
end

-- The store's clock, read exactly once.
local t = redis.call('TIME')
local serverNow = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function invalid()
  return reply('INVALID', serverNow, serverNow, 0, 0, 0, 0)
end

-- Stored state: nil (none), false (incompatible), or a table of the fields.
local FIELDS = { 'schema', 'alg', 'policy', 'rev', 'last', 'a', 'b', 'c' }
local function load(key, alg, policy, rev)
  local h = redis.pcall('HMGET', key, unpack(FIELDS))
  if type(h) ~= 'table' or h.err then
    return false -- not a hash
  end
  local present = 0
  for i = 1, #FIELDS do
    if h[i] then
      present = present + 1
    end
  end
  if present == 0 then
    if redis.call('EXISTS', key) == 1 then
      return false -- a hash of foreign fields
    end
    return nil
  end
  if present ~= #FIELDS or h[1] ~= SCHEMA or h[2] ~= alg or h[3] ~= policy
      or uint(h[4], 1, 4294967295) ~= rev then
    return false
  end
  local s = { last = uint(h[5], 0, MAX), a = uint(h[6], 0, MAX), b = uint(h[7], 0, MAX), c = uint(h[8], 0, MAX) }
  if s.last == nil or s.a == nil or s.b == nil or s.c == nil then
    return false
  end
  return s
end

local function store(key, alg, policy, rev, last, a, b, c, ttl)
  redis.call('HSET', key, 'schema', SCHEMA, 'alg', alg, 'policy', policy, 'rev', dec(rev),
    'last', dec(last), 'a', dec(a), 'b', dec(b), 'c', dec(c))
  if ttl < 1 then
    ttl = 1
  end
  redis.call('PEXPIRE', key, dec(ttl))
end

local function policyID(s)
  if type(s) ~= 'string' or #s < 1 or #s > 128 or not string.find(s, '^[a-z0-9._:/%-]+$') then
    return nil
  end
  return s
end
-- End of the shared prelude.

local key = KEYS[1]
local ALG = 'fixed_window'
local policy = policyID(ARGV[1])
local rev = uint(ARGV[2], 1, 4294967295)
local limit = uint(ARGV[3], 0, MAX)
local window = uint(ARGV[4], 1, MAX_DURATION)
local maxCost = uint(ARGV[5], 0, MAX)
local grace = uint(ARGV[6], 0, MAX_DURATION)
local maxRegression = uint(ARGV[7], 0, MAX_DURATION)
local cost = uint(ARGV[8], 1, MAX)
if #KEYS ~= 1 or #ARGV ~= 8 or not policy or not rev or not limit or not window or not maxCost
    or not grace or not maxRegression or not cost or maxCost > limit or cost > maxCost then
  return invalid()
end

local st = load(key, ALG, policy, rev)
if st == false then
  return reply('STATE_INCOMPATIBLE', serverNow, serverNow, limit, 0, 0, 0)
end
local now = serverNow
if st and serverNow < st.last then
  if st.last - serverNow > maxRegression then
    return reply('CLOCK_UNSAFE', serverNow, serverNow, limit, 0, 0, 0)
  end
  now = st.last
end

local w = idiv(now, window)
local windowEnd = (w + 1) * window
local consumed = 0
if st and st.a == w then
  consumed = st.b
end
if cost <= limit - consumed then
  consumed = consumed + cost
  store(key, ALG, policy, rev, now, w, consumed, 0, windowEnd - now + grace)
  return reply('ALLOWED', serverNow, now, limit, limit - consumed, 0, windowEnd)
end
-- A lowered limit can leave more consumed than the limit: remaining is 0.
local remaining = limit - consumed
if remaining < 0 then
  remaining = 0
end
return reply('DENIED', serverNow, now, limit, remaining, windowEnd - now, windowEnd)
