-- lease-v2.lua: one operation on one concurrency limit's lease set, the
-- same step as limiter.Lease (docs/algorithms.md, "concurrency"). Version 2.
--
-- KEYS[1]  the lease set: a string of 10-byte entries
--          struct.pack('>dH', expiryMillis, count), soonest expiry first
--          (the sliding log's packing); absent when no lease is held
-- ARGV[1]  the operation (limiter.LeaseOp): 0 take, 1 release, 2 return
-- ARGV[2]  1 when a take consumes, 0 for a check or a probe
-- ARGV[3]  the limit, 0..10000 (limiter.MaxConcurrency)
-- ARGV[4]  the lease TTL in ms, 1..86400000 (limiter.MaxLeaseTTL)
-- ARGV[5]  the cost: the leases taken or given back, 1..10000
-- ARGV[6]  the cleanup grace in ms, 0..MAX_DURATION
-- ARGV[7]  a release's or return's identity: the expiry (ms) of the leases
--          it gives back, as the take's reply reported it; 0 for none
--          (a take; or the soonest-expiring, latest for a return)
-- ARGV[8]  the caller's deadline in ms of Redis's clock, 0 for none: a run
--          whose TIME is past it changes nothing and replies { 0, now }
--
-- Leases whose expiry is at or before TIME are no longer held. A take is
-- ALLOWED iff held + cost <= limit and then (when it consumes) adds cost
-- leases in an entry of their own, expiring at now + TTL but at least 1 ms
-- after the latest held one (its resetAt: the leases' identity); DENIED
-- changes nothing. A release or a
-- return with an identity removes at most cost of the held leases that
-- expire then (none once they expired); without one a release removes
-- min(cost, held) leases, soonest-expiring first, and a return the
-- latest-expiring. One GET, then at
-- most one SET (PXAT: the latest expiry plus the grace) or UNLINK, which
-- the documented ACL user may run (docs/redis.md).
--
-- Reply: { 0, serverNowMillis } when the deadline had passed; else
-- 7 integers: status (limiter.Status: 1 ALLOWED, 2 DENIED,
-- 4 STATE_INCOMPATIBLE, 5 INVALID), serverNowMillis, effectiveNowMillis
-- (the same), limit (0 for INVALID), remaining (limit - held, not below 0),
-- retryAfterMillis (DENIED: until enough leases expire), resetAtMillis (when
-- the last held lease expires; serverNowMillis when none is).

local MAX = 9007199254740991 -- 2^53-1
local MAX_DURATION = 316224000000 -- ten years in ms, as limiter.NewPolicy
local MAX_LEASES = 10000 -- limiter.MaxConcurrency
local MAX_TTL = 86400000 -- limiter.MaxLeaseTTL in ms
local ENTRY = 10 -- limiter.SlidingLogEntryBytes
local pack, unpack, sub, max, min = struct.pack, struct.unpack, string.sub, math.max, math.min
local ALLOWED, DENIED, INCOMPATIBLE, INVALID = 1, 2, 4, 5

-- arg is ARGV[i] as an integer in [lo, hi], or nil.
local function arg(i, lo, hi)
  local n = tonumber(ARGV[i])
  if n == nil or n % 1 ~= 0 or n < lo or n > hi then
    return nil
  end
  return n
end

-- last is the expiry of a set's last entry, or dflt when it is empty.
local function last(set, dflt)
  if set == '' then
    return dflt
  end
  return (unpack('>d', set, #set - ENTRY + 1))
end

-- live reads a stored set: the part still held at now and how many leases
-- it holds, or nil when the set is not a lease set.
local function live(set, now)
  local n = #set / ENTRY
  if #set % ENTRY ~= 0 or n > MAX_LEASES then
    return nil
  end
  local from, held, prev = n + 1, 0, 1
  for i = 1, n do
    local at, c = unpack('>dH', set, (i - 1) * ENTRY + 1)
    if not (at >= prev and at <= MAX and at % 1 == 0 and c >= 1) then
      return nil
    end
    prev = at
    if at > now then
      if from > n then
        from = i
      end
      held = held + c
    end
  end
  return sub(set, (from - 1) * ENTRY + 1), held
end

-- retry is how long until need leases of a live set have expired.
local function retry(set, now, need)
  local freed = 0
  for i = 1, #set / ENTRY do
    local at, c = unpack('>dH', set, (i - 1) * ENTRY + 1)
    freed = freed + c
    if freed >= need then
      return max(1, at - now)
    end
  end
  return max(1, last(set, now) - now)
end

-- removeAt takes count leases (at most those held) expiring at at off a
-- live set; an entry left with none is dropped. It returns the set and how
-- many it took.
local function removeAt(set, at, count)
  local out, took = {}, 0
  for i = 1, #set / ENTRY do
    local t, c = unpack('>dH', set, (i - 1) * ENTRY + 1)
    if t == at and count > took then
      local k = min(c, count - took)
      took, c = took + k, c - k
    end
    if c > 0 then
      out[#out + 1] = pack('>dH', t, c)
    end
  end
  return table.concat(out), took
end

-- add appends count leases expiring at at, after the last entry.
local function add(set, at, count)
  return set .. pack('>dH', at, count)
end

-- remove takes count leases (at most those held) off a live set: the
-- soonest-expiring first, or the latest-expiring when latest.
local function remove(set, count, latest)
  local n = #set / ENTRY
  if not latest then
    for i = 1, n do
      local at, c = unpack('>dH', set, (i - 1) * ENTRY + 1)
      if count < c then
        return pack('>dH', at, c - count) .. sub(set, i * ENTRY + 1)
      end
      count = count - c
    end
    return ''
  end
  for i = n, 1, -1 do
    local at, c = unpack('>dH', set, (i - 1) * ENTRY + 1)
    if count < c then
      return sub(set, 1, (i - 1) * ENTRY) .. pack('>dH', at, c - count)
    end
    count = count - c
  end
  return ''
end

local now
do
  local t = redis.call('TIME')
  local us = t[2] + 0
  now = t[1] * 1000 + (us - us % 1000) / 1000
end
local op, consumes, limit = arg(1, 0, 2), arg(2, 0, 1), arg(3, 0, MAX_LEASES)
local ttl, cost, grace = arg(4, 1, MAX_TTL), arg(5, 1, MAX_LEASES), arg(6, 0, MAX_DURATION)
local at, deadline = arg(7, 0, MAX), arg(8, 0, MAX)
if #KEYS ~= 1 or #ARGV ~= 8 or not (op and consumes and limit and ttl and cost and grace and at and deadline)
    or (op == 0 and at ~= 0) or now > MAX - MAX_TTL - MAX_DURATION then
  return { INVALID, now, now, 0, 0, 0, 0 }
end
if deadline ~= 0 and now > deadline then
  return { 0, now }
end
local stored = redis.call('GET', KEYS[1]) or ''
local set, held = live(stored, now)
if set == nil then
  return { INCOMPATIBLE, now, now, limit, 0, 0, 0 }
end
local nextSet
if op == 0 then
  if held + cost > limit then
    return { DENIED, now, now, limit, max(0, limit - held), retry(set, now, held + cost - limit), last(set, now) }
  end
  if consumes == 0 then
    return { ALLOWED, now, now, limit, limit - held, 0, last(set, now) }
  end
  nextSet = add(set, max(now + ttl, last(set, 0) + 1), cost)
  held = held + cost
elseif at ~= 0 then
  local took
  nextSet, took = removeAt(set, at, cost)
  if took == 0 and #set == #stored then
    return { ALLOWED, now, now, limit, max(0, limit - held), 0, last(set, now) }
  end
  held = held - took
else
  local take = min(cost, held)
  if take == 0 and #set == #stored then
    return { ALLOWED, now, now, limit, max(0, limit - held), 0, last(set, now) }
  end
  nextSet = remove(set, take, op == 2)
  held = held - take
end
local resetAt = last(nextSet, now)
if nextSet == '' then
  redis.call('UNLINK', KEYS[1])
else
  redis.call('SET', KEYS[1], nextSet, 'PXAT', resetAt + grace)
end
return { ALLOWED, now, now, limit, max(0, limit - held), 0, resetAt }
