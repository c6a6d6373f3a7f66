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
-- never before that write). One HSET of the changed fields; the TTL is
-- kept. It does not read TIME.
--
-- Reply: an array of N integers, 1 refunded, 0 nothing to refund.
-- A wrong number of arguments is an error reply.
-- Not on the hot path (it runs only after a split batch did not commit):
-- it reads the state with the batch's load.lua block.

-- #include prelude.lua

-- The arguments are canonical decimal strings (this program is not hot;
-- the batch program takes packed numbers). uint parses a canonical decimal integer in [lo, hi] (digits only, no sign,
-- no leading zero, at most 16 digits), or returns nil.
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

-- exact returns n when it is an integer in [0, 2^53-1]; anything else is a
-- program bug and raises (the store reports the program failed).
local function exact(n)
  if not (n >= 0 and n <= MAX) or n % 1 ~= 0 then
    error('envoy-rls: inexact value')
  end
  return n
end

local max = math.max
local NARG = 8
local n = #KEYS
if n < 1 or #ARGV ~= n * NARG then
  return redis.error_reply('envoy-rls: rate-refund-v1 takes 8 arguments per key')
end
local out = {}
for i = 1, n do
  local base = (i - 1) * NARG
  local key = KEYS[i]
  local alg = ARGV[base + 1]
  local policy = policyID(ARGV[base + 2])
  local rev = uint(ARGV[base + 3], 1, 4294967295)
  local limit = uint(ARGV[base + 4], 0, MAX)
  local p2 = uint(ARGV[base + 5], 1, MAX)
  local p3 = uint(ARGV[base + 6], 0, MAX_DURATION)
  local cost = uint(ARGV[base + 7], 1, MAX)
  local at = uint(ARGV[base + 8], 0, MAX)
  local done = 0
  if policy and rev and limit and p2 and p3 and cost and at then
    local st, stLast, stA, stB, stC, stL = nil, 0, 0, 0, 0, ''
-- #include load.lua
    -- The algorithm dispatch: its fragment's refund section.
    if not st then
      -- Rolled, expired or foreign: what was taken went with it.
    elseif alg == 'fixed_window' then
-- #include fixed-window.lua refund
    elseif alg == 'sliding_window' then
-- #include sliding-window.lua refund
    elseif alg == 'token_bucket' then
-- #include token-bucket.lua refund
    elseif alg == 'gcra' then
-- #include gcra.lua refund
    elseif alg == 'sliding_log' then
-- #include sliding-log.lua refund
    end
  end
  out[i] = done
end
return out
