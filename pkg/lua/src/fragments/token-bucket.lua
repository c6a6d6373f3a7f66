-- fragments/token-bucket.lua: the token bucket of docs/algorithms.md,
-- once, in three sections: valid, an inline block of a
-- program's keyArgs; step and refund, functions. Refill carries the
-- sub-token remainder, so it does not depend on how often the bucket is
-- evaluated. Its state: level, the tokens; epoch, the last refill ms;
-- carry, the remainder, in 1/period tokens.
-- #section valid
-- uses: MAX, MAX_DURATION, fmod
-- in: valid, limit, p2, p3
-- out: valid
-- Its argument rules (limiter.NewPolicy): the capacity (limit), refill
-- amount (p2) and period ms (p3); capacity * period + amount stays below
-- 2^53.
valid = valid and p2 >= 1 and p2 <= MAX and p3 >= 1 and p3 <= MAX_DURATION
  and limit <= (MAX - p2 - fmod(MAX - p2, p3)) / p3
-- #section step
-- uses: fmod, ceilDiv
-- defines: tokenBucketStep

-- tokenBucketStep is limiter.Check of a token bucket: a state (st true,
-- with level, epoch, carry; nil none) at now, for a capacity of limit
-- refilled by amount every period ms, the grace and the cost. It returns
-- what fixedWindowStep returns.
local function tokenBucketStep(st, epoch, level, carry, now, limit, amount, period, grace, cost)
  local tokens, rem = limit, 0
  if st and level < limit then
    -- (A lowered capacity can leave more stored tokens than it: full.)
    tokens, rem = level, carry
    local elapsed = now - epoch
    if elapsed < 0 then
      elapsed = 0
    end
    local missing = (limit - tokens) * period - rem
    local fullAfter = 0
    if missing > 0 then
      fullAfter = ceilDiv(missing, amount)
    end
    if elapsed >= fullAfter then
      tokens, rem = limit, 0
    else
      -- elapsed * amount < missing: exact, and tokens stay below capacity.
      local units = elapsed * amount + rem
      rem = fmod(units, period)
      tokens = tokens + (units - rem) / period
    end
  end
  -- ms until the bucket is full, before the cost, then (allowed) after it.
  local full = 0
  if tokens < limit then
    full = ceilDiv((limit - tokens) * period - rem, amount)
  end
  local resetBefore = now + full
  if cost <= tokens then
    local left = tokens - cost
    full = ceilDiv((limit - left) * period - rem, amount)
    return true, now, left, rem, full + grace, left, 0, now + full, tokens, resetBefore
  end
  return false, 0, 0, 0, 0, tokens, ceilDiv((cost - tokens) * period - rem, amount), resetBefore, tokens, resetBefore
end
-- #section refund
-- defines: tokenBucketRefund

-- tokenBucketRefund gives back cost taken at effective time at: when the
-- bucket was last written at or after at, tokens += cost, at most the
-- capacity (a full bucket drops its sub-token remainder, as the step
-- does). It returns whether it gave back, and the state.
local function tokenBucketRefund(epoch, level, carry, limit, period, cost, at)
  if period >= 1 and epoch >= at then
    if level + cost >= limit then
      return true, epoch, limit, 0
    end
    return true, epoch, level + cost, carry
  end
  return false, epoch, level, carry
end
-- End of token-bucket.lua.
