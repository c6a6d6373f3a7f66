-- fragments/token-bucket.lua: the token bucket of docs/algorithms.md,
-- once, in three sections: valid, an inline block of a
-- program's keyArgs; step and refund, functions. Refill carries the
-- sub-token remainder, so it does not depend on how often the bucket is
-- evaluated. Its state: level, the tokens; epoch, the last refill ms;
-- carry, the remainder, in 1/period tokens.
-- #section valid
-- uses: MAX, MAX_DURATION, fmod
-- in: valid, ceiling, p2, p3
-- out: valid
-- Its argument rules (limiter.NewPolicy): the capacity (limit), refill
-- amount (p2) and period ms (p3); the ceiling (the capacity, twice it for
-- a charge: a debt of one capacity) * period + amount stays below 2^53.
valid = valid and p2 >= 1 and p2 <= MAX and p3 >= 1 and p3 <= MAX_DURATION
  and ceiling <= (MAX - p2 - fmod(MAX - p2, p3)) / p3
-- #section step
-- uses: fmod, ceilDiv
-- defines: bucketAt, tokenBucketStep, tokenBucketCharge, tokenBucketGiveBack

-- bucketAt is limiter's bucketAt: the bucket of a state (st true, with
-- epoch, level, carry; nil none) refilled up to now, for a capacity of
-- limit refilled by amount every period ms and its ceiling: the tokens
-- (below 0 in debt: a charge stores a bucket in debt as the tokens it
-- holds at a refill time after now) and the remainder in [0, period).
local function bucketAt(st, epoch, level, carry, now, limit, amount, period, ceiling)
  if not st or level >= limit then
    -- (A lowered capacity can leave more stored tokens than it: full.)
    return limit, 0
  end
  if epoch > now then
    -- In debt: at most a whole debt (nor a debt of nothing: empty).
    local dms, most = epoch - now, ceilDiv(ceiling * period, amount)
    if dms > most then
      dms = most
    end
    local debt = dms * amount - (level * period + carry)
    if debt > (ceiling - limit) * period then
      debt = (ceiling - limit) * period
    end
    if debt <= 0 then
      return 0, 0
    end
    local r = fmod(debt, period)
    if r ~= 0 then
      return -((debt - r) / period + 1), period - r
    end
    return -(debt / period), 0
  end
  local tokens, rem = level, carry
  local elapsed = now - epoch
  local missing = (limit - tokens) * period - rem
  local fullAfter = 0
  if missing > 0 then
    fullAfter = ceilDiv(missing, amount)
  end
  if elapsed >= fullAfter then
    return limit, 0
  end
  -- elapsed * amount < missing: exact, and tokens stay below capacity.
  local units = elapsed * amount + rem
  rem = fmod(units, period)
  return tokens + (units - rem) / period, rem
end

-- tokenBucketStep is limiter.Check of a token bucket: a state (st true,
-- with level, epoch, carry; nil none) at now, for a capacity of limit
-- refilled by amount every period ms, the grace, the cost and the ceiling.
-- It returns what fixedWindowStep returns.
local function tokenBucketStep(st, epoch, level, carry, now, limit, amount, period, grace, cost, ceiling)
  local tokens, rem = bucketAt(st, epoch, level, carry, now, limit, amount, period, ceiling)
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
  local remaining = tokens
  if remaining < 0 then
    remaining = 0
  end
  return false, 0, 0, 0, 0, remaining, ceilDiv((cost - tokens) * period - rem, amount), resetBefore, remaining,
    resetBefore
end

-- tokenBucketCharge is limiter's tokenBucketCharge: cost taken from the
-- bucket at now whatever it holds, down to the ceiling's debt at most. It
-- returns the state to write (epoch, level, carry) and its ttl.
local function tokenBucketCharge(st, epoch, level, carry, now, limit, amount, period, grace, cost, ceiling)
  local tokens, rem = bucketAt(st, epoch, level, carry, now, limit, amount, period, ceiling)
  local units = tokens * period + rem
  local floor = (limit - ceiling) * period -- (never -0: a settle's ceiling may be the limit)
  if units < floor then
    floor = units
  end
  units = units - cost * period
  if units < floor then
    units = floor
  end
  local e = now
  if units < 0 then
    -- At most one unit short of full there (limiter's tokenBucketCharge).
    local q = ceilDiv(-units, amount)
    e, units = now + q, q * amount + units
    if units > limit * period - 1 then
      units = limit * period - 1
    end
  end
  local c = fmod(units, period)
  local l = (units - c) / period
  local full = 0
  if l < limit then
    full = ceilDiv((limit - l) * period - c, amount)
  end
  return e, l, c, e - now + full + grace
end

-- tokenBucketGiveBack is limiter's tokenBucketRefund, a reservation's
-- shortfall: cost taken at effective time at given back at now, when the
-- bucket was written at or after at: the bucket refilled to now gains
-- the tokens, at most up to its capacity (a bucket in debt owes them
-- less: stored at the refill time after now, as tokenBucketCharge). It
-- returns the state (epoch, level, carry).
local function tokenBucketGiveBack(epoch, level, carry, now, limit, amount, period, ceiling, cost, at)
  if epoch < at then
    return epoch, level, carry
  end
  local tokens, rem = bucketAt(true, epoch, level, carry, now, limit, amount, period, ceiling)
  local units = tokens * period + rem + cost * period
  if units > limit * period then
    units = limit * period
  end
  local e = now
  if units < 0 then
    local q = ceilDiv(-units, amount)
    e, units = now + q, q * amount + units
    if units > limit * period - 1 then
      units = limit * period - 1
    end
  end
  local c = fmod(units, period)
  return e, (units - c) / period, c
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
