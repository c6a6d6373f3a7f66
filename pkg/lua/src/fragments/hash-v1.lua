-- fragments/hash-v1.lua: the state of rate-batch-v1.lua and
-- rate-refund-v1.lua, one hash per key (docs/algorithms.md, "Lua hash
-- fields"): schema, alg, policy, rev, last, a, b, c, canonical decimal
-- integers, and a sliding log's l and a penalty box's pu and pn. Its a and
-- b are the state's (limiter.State) epoch and level for the windows and
-- the sliding log, level and epoch for the token bucket and GCRA; c is
-- carry, last lastObservedMs, l the log, pu penaltyUntilMs and pn
-- penaltyLevel. Two sections: load (both programs) and store (the batch
-- program).
-- #section load
-- uses: MAX, MAX_SLIDING, DECIMAL, find
-- defines: SCHEMA, loadPenalty, loadState

local SCHEMA = '1'

-- loadPenalty reads the penalty fields of a compatible hash: false when
-- either is not a canonical decimal below 2^53 (incompatible).
local function loadPenalty(key)
  local h = redis.call('HMGET', key, 'pu', 'pn')
  if not (h[1] or h[2]) then
    return true, 0, 0
  end
  if h[1] and h[2] and find(h[1], DECIMAL) and find(h[2], DECIMAL) and #h[1] <= 16 and #h[2] <= 2 then
    local untilMs = h[1] + 0
    return untilMs <= MAX, untilMs, h[2] + 0
  end
  return false, 0, 0
end

-- loadState reads key's hash for alg, policy and revision rev. It returns
-- st (nil: no hash; false: incompatible; true), lastObservedMs, epoch,
-- level, carry (0 when st is nil), the log ('' but for a sliding log),
-- and, with penalty, the penalty box (0, 0 without). One HMGET; EXISTS
-- only when no field is present (a hash of foreign fields is
-- incompatible, not empty); a key of another type is incompatible. rev,
-- last, a, b, c must be canonical decimal integers, rev the request's and
-- the others below 2^53; a sliding window's counts above any sliding limit
-- cannot be ours and would leave exact arithmetic.
local function loadState(key, gi, alg, policy, rev, penalty)
  local h
  if alg == 'sliding_log' then
    h = redis.pcall('HMGET', key, 'schema', 'alg', 'policy', 'rev', 'last', 'a', 'b', 'c', 'l')
  else
    h = redis.pcall('HMGET', key, 'schema', 'alg', 'policy', 'rev', 'last', 'a', 'b', 'c')
  end
  if h.err then
    -- Not a hash: incompatible.
    return false, 0, 0, 0, 0, '', 0, 0
  elseif not (h[1] == SCHEMA and h[2] == alg and h[3] == policy) then
    if not (h[1] or h[2] or h[3] or h[4] or h[5] or h[6] or h[7] or h[8]) and redis.call('EXISTS', key) == 0 then
      return nil, 0, 0, 0, 0, '', 0, 0
    end
    return false, 0, 0, 0, 0, '', 0, 0
  end
  -- Parsed in place; "0" and "1" (c, small counts, the usual revision)
  -- need no pattern match and no strtod. A missing field is false. More
  -- than 16 digits is above 2^53-1, refused below.
  for f = 4, 8 do
    local s = h[f]
    if s == '0' then
      h[f] = 0
    elseif s == '1' then
      h[f] = 1
    elseif s and find(s, DECIMAL) then
      h[f] = s + 0
    else
      return false, 0, 0, 0, 0, '', 0, 0
    end
  end
  if not (h[4] == rev and h[5] <= MAX and h[6] <= MAX and h[7] <= MAX and h[8] <= MAX) then
    return false, 0, 0, 0, 0, '', 0, 0
  end
  local epoch, level = h[6], h[7]
  if alg == 'token_bucket' or alg == 'gcra' then
    epoch, level = level, epoch
  end
  if alg == 'sliding_window' and (level > MAX_SLIDING or h[8] > MAX_SLIDING) then
    return false, 0, 0, 0, 0, '', 0, 0
  end
  local st, penaltyUntilMs, penaltyLevel = true, 0, 0
  if penalty then
    st, penaltyUntilMs, penaltyLevel = loadPenalty(key)
  end
  -- A sliding log's log, checked where the step reads it.
  return st, h[5], epoch, level, h[8], h[9] or '', penaltyUntilMs, penaltyLevel
end
-- #section store
-- uses: serverNow, format, SCHEMA
-- defines: serverNowText, storeState, writeOffence

-- The serverNow formatted, once for every key that writes it.
local serverNowText = format('%d', serverNow)

-- storeState writes key's hash: the state (lastObservedMs, epoch, level,
-- carry, log) with an expiry ttl ms after lastObservedMs on the effective
-- clock; fresh: no hash before this request; storedEpoch, storedLevel,
-- storedCarry: the state as the hash holds it. One HSET, then the TTL
-- (one PEXPIRE, when it changes: see below). A new hash gets every field;
-- an existing one only last, b and whichever of a and c changed (a fixed
-- window's c is always 0, a window's a changes once per window): hash
-- fields are canonical decimal strings, so an equal number is an equal
-- string, and every argument left out is Redis CPU saved. Numbers go to
-- Redis as format('%d') strings, the canonical decimal form of an exact
-- integer below 2^53: a number argument would be formatted by Redis 7.0
-- with snprintf('%.17g'), which costs more. The penalty fields
-- (penaltyUntilMs, penaltyLevel) are written by writeOffence alone, and
-- gi is unused: this store reads each key when it evaluates it.
local function storeState(key, gi, fresh, alg, policy, rev, lastObservedMs, epoch, level, carry, log, ttl,
                          storedEpoch, storedLevel, storedCarry, penaltyUntilMs, penaltyLevel)
  local a, b, hashA = epoch, level, storedEpoch
  if alg == 'token_bucket' or alg == 'gcra' then
    a, b, hashA = level, epoch, storedLevel
  end
  local c, hashC = carry, storedCarry
  if ttl < 1 then
    ttl = 1
  end
  -- (checkExact checked a, b, c, ttl and the expiry.)
  -- The key expires at lastObservedMs + ttl on the effective clock, which
  -- is ttl + (lastObservedMs - serverNow) ms from Redis's: the same instant for every write of
  -- one window (fixed window: windowEnd + grace; sliding window: the next
  -- window's end + grace), whatever the clock rule did to the effective
  -- now.
  local px = ttl + lastObservedMs - serverNow
  local ls = serverNowText
  if lastObservedMs ~= serverNow then
    ls = format('%d', lastObservedMs)
  end
  -- A token bucket's b is now; a window's count is 1 after its first
  -- request of cost 1.
  local bs = ls
  if b == 1 then
    bs = '1'
  elseif b ~= lastObservedMs then
    bs = format('%d', b)
  end
  if alg == 'sliding_log' then
    -- The log changes with every write: every field but the policy's.
    if fresh then
      redis.call('HSET', key, 'schema', SCHEMA, 'alg', alg, 'policy', policy, 'rev', format('%d', rev),
        'last', ls, 'a', format('%d', a), 'b', bs, 'c', format('%d', c), 'l', log)
    else
      redis.call('HSET', key, 'last', ls, 'a', format('%d', a), 'b', bs, 'c', format('%d', c), 'l', log)
    end
  elseif fresh then
    -- c is often 0 (always for a fixed window), rev often 1.
    local cs, rs = '0', '1'
    if c ~= 0 then
      cs = format('%d', c)
    end
    if rev ~= 1 then
      rs = format('%d', rev)
    end
    redis.call('HSET', key, 'schema', SCHEMA, 'alg', alg, 'policy', policy, 'rev', rs,
      'last', ls, 'a', format('%d', a), 'b', bs, 'c', cs)
  elseif a ~= hashA then
    if c ~= hashC then
      redis.call('HSET', key, 'last', ls, 'a', format('%d', a), 'b', bs, 'c', format('%d', c))
    else
      redis.call('HSET', key, 'last', ls, 'a', format('%d', a), 'b', bs)
    end
  elseif c ~= hashC then
    redis.call('HSET', key, 'last', ls, 'b', bs, 'c', format('%d', c))
  else
    redis.call('HSET', key, 'last', ls, 'b', bs)
  end
  -- So a window's hash that this window already wrote (a, the window id,
  -- unchanged) has that expiry already: no PEXPIRE. Any other algorithm's
  -- expiry (the token bucket's) moves with every write.
  if fresh or a ~= hashA or (alg ~= 'fixed_window' and alg ~= 'sliding_window') then
    redis.call('PEXPIRE', key, format('%d', px))
  end
end

-- writeOffence writes an offence against a penalty box (penaltyStep): its
-- penaltyUntilMs and penaltyLevel, and the hash's expiry raised to px ms.
local function writeOffence(key, gi, penaltyUntilMs, penaltyLevel, px)
  redis.call('HSET', key, 'pu', format('%d', penaltyUntilMs), 'pn', format('%d', penaltyLevel))
  redis.call('PEXPIRE', key, format('%d', px), 'GT')
end
-- End of hash-v1.lua.
