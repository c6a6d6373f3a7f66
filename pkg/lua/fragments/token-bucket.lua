-- fragments/token-bucket.lua: the token bucket of docs/algorithms.md, once.
-- Refill carries the sub-token remainder, so it does not depend on how often
-- the bucket is evaluated.
local function token_bucket_valid(capacity, amount, period)
  return amount >= 1 and amount <= MAX and period >= 1 and period <= MAX_DURATION
    and capacity <= idiv(MAX - amount, period)
end

local function token_full(capacity, tokens, rem, amount, period)
  if tokens < capacity then
    return ceildiv((capacity - tokens) * period - rem, amount)
  end
  return 0
end

local function token_bucket(st, now, capacity, amount, period, grace, cost)
  local tokens, rem = capacity, 0
  if st and st.a < capacity then
    -- (A lowered capacity can leave more stored tokens than it: full.)
    tokens, rem = st.a, st.c
    local elapsed = now - st.b
    if elapsed < 0 then
      elapsed = 0
    end
    local missing = (capacity - tokens) * period - rem
    local fullAfter = 0
    if missing > 0 then
      fullAfter = ceildiv(missing, amount)
    end
    if elapsed >= fullAfter then
      tokens, rem = capacity, 0
    else
      -- elapsed * amount < missing: exact, and tokens stay below capacity.
      local units = elapsed * amount + rem
      tokens = tokens + idiv(units, period)
      rem = fmod(units, period)
    end
  end
  if cost <= tokens then
    local held, heldReset = tokens, now + token_full(capacity, tokens, rem, amount, period)
    tokens = tokens - cost
    local full = token_full(capacity, tokens, rem, amount, period)
    return true, tokens, now, rem, full + grace, tokens, 0, now + full, held, heldReset
  end
  local full = token_full(capacity, tokens, rem, amount, period)
  local retry = ceildiv((cost - tokens) * period - rem, amount)
  return false, 0, 0, 0, 0, tokens, retry, now + full, tokens, now + full
end
-- End of token-bucket.lua.
