-- fragments/decimal.lua: argument parsing for the programs that take
-- decimal strings (the single-key v1 programs and rate-refund-v1.lua; not
-- rate-batch-v1.lua, which takes packed numbers and defines no function).
--
-- uint parses a canonical decimal integer in [lo, hi] (digits only, no sign,
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
-- End of decimal.lua.
