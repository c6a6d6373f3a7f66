-- rate-refund-v1.lua: give back what a committed rate-batch-v1 took, when
-- the request it was part of did not commit elsewhere (a Redis Cluster batch
-- split over several slots; docs/consistency.md). Version 1.
--
-- KEYS[1..N]  the state hashes the batch wrote (one slot)
-- ARGV        eight fields per key, key i at ARGV[8*(i-1)+1 ..]:
--   1 algorithm, 2 policy ID, 3 policy revision, 4 limit (capacity),
--   5, 6 the two algorithm arguments (as rate-batch-v1; the algorithm's
--   fragment names them; a calendar fixed window: the end and the length
--   in ms of the period holding 8),
--   7 cost taken, 8 effectiveNowMillis of the batch's reply
--
-- Per key, only when the hash still holds this policy's state (same schema,
-- algorithm, policy and revision: otherwise it rolled or expired, and what
-- was taken went with it), the algorithm's refund section (its fragment)
-- gives the cost back when the state is still the one the batch wrote to
-- (fixed window: the same window, for a calendar window the same period;
-- sliding window: the same or the next; token bucket and gcra: written at
-- or after effectiveNow; sliding log: its entry of effectiveNow still
-- logged), never below zero and never above the capacity (gcra: the TAT
-- never before that write). One HSET of the state's fields (a, b, c and a
-- sliding log's l); the TTL is kept. It does not read TIME.
--
-- Reply: an array of N integers, 1 refunded, 0 nothing to refund.
-- A wrong number of arguments is an error reply.
-- Not on the hot path (it runs only after a split batch did not commit):
-- it reads the state with the batch's loadState (hash-v1.lua).

-- #include prelude.lua
-- #include exact.lua exact
-- #include fixed-window.lua refund
-- #include sliding-window.lua refund
-- #include token-bucket.lua refund
-- #include gcra.lua refund
-- #include sliding-log.lua refund
-- #include algorithms.lua refund
-- #include hash-v1.lua load

-- The arguments are canonical decimal strings (this program is not hot;
-- the batch program takes packed numbers). uint parses a canonical decimal
-- integer in [lo, hi] (digits only, no sign, no leading zero, at most 16
-- digits), or returns nil.
local function uint(s, lo, hi)
  local n = 0
  if s == '0' then
    -- (No pattern match, no strtod.)
  elseif not s or #s > 16 or not find(s, DECIMAL) then
    return nil
  else
    n = s + 0
  end
  if n < lo or n > hi then
    return nil
  end
  return n
end

local function policyID(s)
  if not s or #s > 128 or not find(s, POLICY_ID) then
    return nil
  end
  return s
end

-- refundKey gives back what the batch took from key (its eight ARGV fields
-- start after base): 1 when it wrote, else 0.
local function refundKey(key, base)
  local alg = ARGV[base + 1]
  local policy = policyID(ARGV[base + 2])
  local rev = uint(ARGV[base + 3], 1, 4294967295)
  local limit = uint(ARGV[base + 4], 0, MAX)
  local p2 = uint(ARGV[base + 5], 1, MAX)
  local p3 = uint(ARGV[base + 6], 0, MAX_DURATION)
  local cost = uint(ARGV[base + 7], 1, MAX)
  local at = uint(ARGV[base + 8], 0, MAX)
  if not (policy and rev and limit and p2 and p3 and cost and at) then
    return 0
  end
  local st, last, epoch, level, carry, log = loadState(key, 0, alg, policy, rev, false)
  if not st then
    -- Rolled, expired or foreign: what was taken went with it.
    return 0
  end
  local done
  done, epoch, level, carry, log = refundOf(alg, last, epoch, level, carry, log, limit, p2, p3, cost, at)
  if not done then
    return 0
  end
  if not (exact(epoch) and exact(level) and exact(carry)) then
    -- A program bug: it raises (the store reports the program failed).
    error('envoy-rls: inexact value')
  end
  -- The token bucket and GCRA keep level in a and epoch in b.
  local a, b = epoch, level
  if alg == 'token_bucket' or alg == 'gcra' then
    a, b = level, epoch
  end
  if alg == 'sliding_log' then
    redis.call('HSET', key, 'a', format('%d', a), 'b', format('%d', b), 'c', format('%d', carry), 'l', log)
  else
    redis.call('HSET', key, 'a', format('%d', a), 'b', format('%d', b), 'c', format('%d', carry))
  end
  return 1
end

local NARG = 8
local n = #KEYS
if n < 1 or #ARGV ~= n * NARG then
  return redis.error_reply('envoy-rls: rate-refund-v1 takes 8 arguments per key')
end
local out = {}
for i = 1, n do
  out[i] = refundKey(KEYS[i], (i - 1) * NARG)
end
return out
