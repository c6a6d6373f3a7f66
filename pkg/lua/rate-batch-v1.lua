-- rate-batch-v1.lua: every limit of one Envoy request, all or nothing,
-- version 1 (docs/algorithms.md, limiter.Store).
--
-- KEYS[1..N]  the state hashes (limiter.StorageKey); on a Redis Cluster all
--             in one slot (one hash tag)
-- ARGV        two fields per key, key i at ARGV[2*(i-1)+1 ..]:
--   1 policy ID            [a-z0-9._:/-]{1,128}
--   2 the numbers, packed big-endian as struct.pack('>BBddddddd'): one
--     string and one struct.unpack per key instead of nine decimal strings
--     to intern and parse (each costs Redis CPU):
--       algorithm            1 fixed_window, 2 sliding_window, 3 token_bucket
--       flags                role + 4 * failOpen; role 0 ordinary, 1 shadow,
--                            2 quota, 3 check (limiter.Mode)
--       policy revision      1..2^32-1
--       limit (capacity)     as the v1 program of the algorithm
--       window ms (fixed, sliding) | refill amount (token bucket, reduced)
--       0 (fixed, sliding) | refill period ms (token bucket, reduced)
--       cleanup grace ms     0..ten years
--       max clock regression ms  0..ten years
--       cost                 1..limit
--     Doubles carry every integer below 2^53 exactly; each is checked
--     integral and in range.
-- A key whose fields are invalid answers INVALID (a failure, below); a
-- wrong number of arguments, or a packed field of the wrong length, is an
-- error reply.
--
-- It reads TIME once, then checks every key in order, writing nothing: the
-- state a key would have after an allowed request is kept in the program,
-- so a later key naming the same hash sees it. Then the batch commits iff
-- every ordinary key is ALLOWED and, when there are quota keys, at least one
-- of them is (limiter.Commits: a failure status — CLOCK_UNSAFE,
-- STATE_INCOMPATIBLE, INVALID — counts as a denial, unless failOpen, when
-- the key takes no part; shadow and check keys never block). On commit every
-- ALLOWED key but the check ones is written: one HSET (of every field for a
-- new hash, of last, a, b and c otherwise) and one PEXPIRE per key (the last
-- state of a key named twice). Library functions are locals and numbers are
-- not formatted (see the prelude): Redis CPU per key is what issue 8 budgets.
--
-- Reply: an array of 1 + 7N values
--   1      committed: 1 or 0 (integer)
--   then per key the seven fields of the v1 programs: status (bulk string),
--   serverNowMillis, effectiveNowMillis, limit, remaining, retryAfterMillis,
--   resetAtMillis (integers, exact below 2^53: each is checked integral and
--   in range before it is returned, else the program raises). An ALLOWED key
--   that did not consume (the batch did not commit, or a check key) replies
--   its remaining and reset-at before its cost (limiter.Check's held reply).
-- Runs on Redis 7.0+ and Valkey.

-- #include prelude.lua
-- #include fixed-window.lua
-- #include sliding-window.lua
-- #include token-bucket.lua

-- The store's clock, read exactly once.
local serverNow = exact(millis(redis.call('TIME')))

local NARG = 2
local n = #KEYS
if n < 1 or #ARGV ~= n * NARG then
  return redis.error_reply('envoy-rls: rate-batch-v1 takes 2 arguments per key')
end

local unpack = struct.unpack
-- Sized for one key up front (most requests): no rehash as it fills.
local out = { 0, false, false, false, false, false, false, false }
-- pending: key -> nil (not looked at yet), 'none' (no state), false
-- (incompatible) or the state after the tentative writes so far: the last
-- write of the key, which is the one committed.
-- (Few tables and no helper closures: each costs Redis CPU on every call.)
local pending = {}
local writes = {} -- i -> the state an ALLOWED key would write (see below)
local blocked, quota, quotaAllows = false, 0, false

for i = 1, n do
  local base = (i - 1) * NARG
  local key = KEYS[i]
  local a1, flags, rev, p1, p2, p3, grace, maxRegression, cost = unpack('>BBddddddd', ARGV[base + 2])
  local alg, step
  if a1 == 1 then
    alg, step = 'fixed_window', fixed_window
  elseif a1 == 2 then
    alg, step = 'sliding_window', sliding_window
  elseif a1 == 3 then
    alg, step = 'token_bucket', token_bucket
  end
  local role, failOpen = 0, false
  -- Each number an integer in its range (NaN fails every comparison).
  local flagsOK = flags >= 0 and flags <= 7 and flags % 1 == 0
  if flagsOK then
    role = flags % 4
    failOpen = flags >= 4
  end
  local status, eff, limit, remaining, retry, resetAt = 'INVALID', serverNow, 0, 0, 0, 0
  local policy = policyID(ARGV[base + 1])
  local valid = step and flagsOK and policy
    and rev >= 1 and rev <= 4294967295 and rev % 1 == 0
    and p1 >= 0 and p1 <= MAX and p1 % 1 == 0
    and p2 >= 0 and p2 <= MAX and p2 % 1 == 0
    and p3 >= 0 and p3 <= MAX_DURATION and p3 % 1 == 0
    and grace >= 0 and grace <= MAX_DURATION and grace % 1 == 0
    and maxRegression >= 0 and maxRegression <= MAX_DURATION and maxRegression % 1 == 0
    and cost >= 1 and cost <= MAX and cost % 1 == 0 and cost <= p1
  if valid then
    if alg == 'token_bucket' then
      valid = token_bucket_valid(p1, p2, p3)
    elseif alg == 'sliding_window' then
      valid = p3 == 0 and sliding_window_valid(p1, p2)
    else
      valid = p3 == 0 and fixed_window_valid(p1, p2)
    end
  end
  if valid then
    limit = p1
    local st = pending[key]
    if st == nil then
      st = load(key, alg, policy, rev)
      if st == nil then
        pending[key] = 'none'
      else
        pending[key] = st
      end
    elseif st == 'none' then
      st = nil
    end
    if st == false or (alg == 'sliding_window' and not sliding_window_compatible(st)) then
      status = 'STATE_INCOMPATIBLE'
    else
      local now = clock(st, serverNow, maxRegression)
      if not now then
        status = 'CLOCK_UNSAFE'
      else
        eff = now
        local allowed, a, b, c, ttl, heldRem, heldReset
        allowed, a, b, c, ttl, remaining, retry, resetAt, heldRem, heldReset = step(st, now, p1, p2, p3, grace, cost)
        if allowed then
          status = 'ALLOWED'
          if role == 3 then
            remaining, resetAt = heldRem, heldReset
          else
            -- Both the write and the state a later key on this hash sees.
            -- fresh: the hash did not exist before this call.
            local w = { last = now, a = a, b = b, c = c, ttl = ttl, held = heldRem, heldReset = heldReset, rev = rev, alg = alg,
              fresh = st == nil or st.fresh == true }
            writes[i], pending[key] = w, w
          end
        else
          status = 'DENIED'
        end
      end
    end
  end
  -- limiter.Commits
  if role == 0 or role == 2 then
    if failOpen and status ~= 'ALLOWED' and status ~= 'DENIED' then
      -- A fail-open failure takes no part.
    elseif role == 2 then
      quota = quota + 1
      if status == 'ALLOWED' then
        quotaAllows = true
      end
    elseif status ~= 'ALLOWED' then
      blocked = true
    end
  end
  -- exact, inline for the six numbers: one check instead of six calls.
  if not (eff >= 0 and eff <= MAX and eff % 1 == 0 and limit >= 0 and limit <= MAX and limit % 1 == 0
      and remaining >= 0 and remaining <= MAX and remaining % 1 == 0 and retry >= 0 and retry <= MAX
      and retry % 1 == 0 and resetAt >= 0 and resetAt <= MAX and resetAt % 1 == 0) then
    error('envoy-rls: inexact value')
  end
  local j = 1 + (i - 1) * 7
  out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5], out[j + 6], out[j + 7] =
    status, serverNow, eff, limit, remaining, retry, resetAt
end

local commit = not blocked and (quota == 0 or quotaAllows)
for i = 1, n do
  local w = writes[i]
  if w then
    if commit then
      local key = KEYS[i]
      if pending[key] == w then
        store(key, w.fresh, w.alg, ARGV[(i - 1) * NARG + 1], w.rev, w.last, w.a, w.b, w.c, w.ttl)
      end
    else
      local j = 1 + (i - 1) * 7
      out[j + 5], out[j + 7] = exact(w.held), exact(w.heldReset)
    end
  end
end
if commit then
  out[1] = 1
end
return out
