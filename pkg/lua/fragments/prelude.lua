-- fragments/prelude.lua: shared by every program (assembled in at init by
-- pkg/lua; a test checks each program contains it verbatim). Exact integer
-- helpers, argument parsing and the state hash's load. No redis.call here
-- but HMGET/EXISTS in load.
local MAX = 9007199254740991 -- 2^53-1: every number stays an exact integer
local MAX_DURATION = 316224000000 -- ten years in ms, as limiter.NewPolicy
local SCHEMA = '1'
local S = 1000000 -- sliding-window weight scale (limiter.SlidingScale)

-- Library functions as locals: a global or field lookup per call is a
-- measurable share of a program's Redis CPU.
local find, floor, fmod, format = string.find, math.floor, math.fmod, string.format
-- Decimal strings become numbers by arithmetic coercion (s + 0), not
-- tonumber: Lua 5.1's tonumber is a C call that runs strtod twice
-- (lua_isnumber, then lua_tonumber); the VM's coercion runs it once. Only
-- on strings already known to be decimal integers (a non-number would raise).

-- uint parses a canonical decimal integer in [lo, hi] (digits only, no sign,
-- no leading zero, at most 16 digits), or returns nil. s is a string, or
-- false for a missing hash field.
local function uint(s, lo, hi)
  local n = 0
  if s == '0' then
    -- (A common stored value: no pattern match, no strtod.)
  elseif not s or #s > 16 or not find(s, '^[1-9]%d*$') then
    return nil
  else
    n = s + 0
  end
  if n < lo or n > hi then
    return nil
  end
  return n
end

-- exact returns n when it is an integer in [0, 2^53-1]; anything else is a
-- program bug and raises (the store reports the program failed). n % 1 is
-- computed by the VM with C floor: no function call.
local function exact(n)
  if not (n >= 0 and n <= MAX) or n % 1 ~= 0 then
    error('envoy-rls: inexact value')
  end
  return n
end

-- Exact integer division of non-negative integers below 2^53: C fmod is
-- exact, so a - r is an exact multiple of b and (a - r) / b an exact integer.
-- (math.floor(a / b) can be off by one, and a % b is computed from it.)
local function idiv(a, b)
  return (a - fmod(a, b)) / b
end

-- ceil(a, b) for a >= 0, b > 0, without an a + b - 1 intermediate.
local function ceildiv(a, b)
  local r = fmod(a, b)
  local q = (a - r) / b
  if r ~= 0 then
    q = q + 1
  end
  return q
end

local MAX_SLIDING = idiv(MAX, S)

local function policyID(s)
  if not s or #s > 128 or not find(s, '^[a-z0-9._:/%-]+$') then
    return nil
  end
  return s
end

-- The store's clock in ms; the caller calls TIME exactly once.
local function millis(t)
  return t[1] * 1000 + floor(t[2] / 1000)
end

-- Stored state: nil (none), false (incompatible), or a table of the fields
-- schema, alg, policy, rev, last, a, b, c.
-- One HMGET; EXISTS only when no field is present (a hash of foreign
-- fields is incompatible, not empty).
local function load(key, alg, policy, rev)
  local h = redis.pcall('HMGET', key, 'schema', 'alg', 'policy', 'rev', 'last', 'a', 'b', 'c')
  if h.err then
    return false -- not a hash
  end
  local present = 0
  for i = 1, 8 do
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
  if present ~= 8 or h[1] ~= SCHEMA or h[2] ~= alg or h[3] ~= policy
      or uint(h[4], 1, 4294967295) ~= rev then
    return false
  end
  local s = { last = uint(h[5], 0, MAX), a = uint(h[6], 0, MAX), b = uint(h[7], 0, MAX), c = uint(h[8], 0, MAX) }
  if s.last == nil or s.a == nil or s.b == nil or s.c == nil then
    return false
  end
  return s
end

-- store writes the state: every field at once (one HSET) when the hash is
-- new, only the changing ones (last, a, b, c) over a compatible state that
-- load returned (fresh false); then the TTL (one PEXPIRE). Numbers go to
-- Redis as format('%d') strings, the canonical decimal form of an exact
-- integer below 2^53: a number argument would be formatted by Redis 7.0 with
-- snprintf('%.17g'), which costs more Redis CPU than the integer format.
local function store(key, fresh, alg, policy, rev, last, a, b, c, ttl)
  if ttl < 1 then
    ttl = 1
  end
  -- exact, inline: one check for the five numbers instead of five calls.
  if not (last >= 0 and last <= MAX and last % 1 == 0 and a >= 0 and a <= MAX and a % 1 == 0
      and b >= 0 and b <= MAX and b % 1 == 0 and c >= 0 and c <= MAX and c % 1 == 0
      and ttl <= MAX and ttl % 1 == 0) then
    error('envoy-rls: inexact value')
  end
  -- c is often 0 (always for a fixed window): "0" needs no format call.
  local cs = '0'
  if c ~= 0 then
    cs = format('%d', c)
  end
  if fresh then
    redis.call('HSET', key, 'schema', SCHEMA, 'alg', alg, 'policy', policy, 'rev', format('%d', exact(rev)),
      'last', format('%d', last), 'a', format('%d', a), 'b', format('%d', b), 'c', cs)
  else
    redis.call('HSET', key, 'last', format('%d', last), 'a', format('%d', a), 'b', format('%d', b), 'c', cs)
  end
  redis.call('PEXPIRE', key, format('%d', ttl))
end

-- clock applies the common clock rule to a loaded state: the effective now,
-- or nil when the store clock is behind the state's last-observed time by
-- more than maxRegression (CLOCK_UNSAFE).
local function clock(st, serverNow, maxRegression)
  if st and serverNow < st.last then
    if st.last - serverNow > maxRegression then
      return nil
    end
    return st.last
  end
  return serverNow
end

-- Every algorithm function below has the signature
--   f(st, now, p1, p2, p3, grace, cost)
-- (fixed and sliding window: p1 limit, p2 window ms; token bucket: p1
-- capacity, p2 refill amount, p3 refill period ms) and returns
--   allowed, a, b, c, ttl, remaining, retryAfter, resetAt,
--   heldRemaining, heldResetAt
-- where (a, b, c, ttl) is the state to write when allowed, and held* are the
-- remaining and reset-at before the cost (an allowed request whose batch
-- does not commit). They are limiter.Check of docs/algorithms.md.
-- End of the prelude.
