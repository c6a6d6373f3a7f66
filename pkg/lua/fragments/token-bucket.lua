-- fragments/token-bucket.lua: the token bucket of docs/algorithms.md, once,
-- in three sections, each included at one dispatch point of a program.
-- Refill carries the sub-token remainder, so it does not depend on how
-- often the bucket is evaluated.
--   valid   (rate-batch-v1.lua) its argument rules, as limiter.NewPolicy:
--           capacity * period + amount stays below 2^53.
--           In: valid (the common rules of valid.lua), limit (capacity),
--           p2 (refill amount), p3 (refill period ms), as unpacked:
--           doubles, any value. Out: valid.
--   step    (rate-batch-v1.lua) limiter.Check as a block.
--           In:  st, stA (tokens), stB (last refill ms), stC (remainder);
--                now; limit (the capacity), p2 (amount), p3 (period);
--                grace, cost.
--           Out: allowed; a, b, c, ttl (the state to write when allowed);
--                remaining, retry, resetAt (the reply); remainingBefore, resetBefore
--                (remaining and reset-at before the cost).
--   refund  (rate-refund-v1.lua) give back cost taken at effective time
--           at: when the bucket was last written at or after at, tokens +=
--           cost, at most the capacity (a full bucket drops its sub-token
--           remainder, as the step does).
--           In: key, stA, stB, stC (a compatible state), limit, p3, cost,
--           at; the program's exact. Out: done, 1 when it wrote.
-- #section valid
valid = valid and p2 >= 1 and p2 <= MAX and p3 >= 1 and p3 <= MAX_DURATION
  and limit <= (MAX - p2 - fmod(MAX - p2, p3)) / p3
-- #section step
do
  local amount, period = p2, p3
  local tokens, rem = limit, 0
  if st and stA < limit then
    -- (A lowered capacity can leave more stored tokens than it: full.)
    tokens, rem = stA, stC
    local elapsed = now - stB
    if elapsed < 0 then
      elapsed = 0
    end
    local missing = (limit - tokens) * period - rem
    local fullAfter = 0
    if missing > 0 then
      local r = fmod(missing, amount)
      fullAfter = (missing - r) / amount
      if r ~= 0 then
        fullAfter = fullAfter + 1
      end
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
  -- full: ms until the bucket is full, ceil((limit - tokens) * period - rem,
  -- amount), 0 when it is; before the cost, then (allowed) after it.
  local full = 0
  if tokens < limit then
    local x = (limit - tokens) * period - rem
    local r = fmod(x, amount)
    full = (x - r) / amount
    if r ~= 0 then
      full = full + 1
    end
  end
  remainingBefore, resetBefore = tokens, now + full
  allowed = cost <= tokens
  if allowed then
    tokens = tokens - cost
    local x = (limit - tokens) * period - rem
    local r = fmod(x, amount)
    full = (x - r) / amount
    if r ~= 0 then
      full = full + 1
    end
    a, b, c, ttl, remaining, retry, resetAt = tokens, now, rem, full + grace, tokens, 0, now + full
  else
    local x = (cost - tokens) * period - rem
    local r = fmod(x, amount)
    retry = (x - r) / amount
    if r ~= 0 then
      retry = retry + 1
    end
    remaining, resetAt = tokens, resetBefore
  end
end
-- #section refund
if p3 >= 1 and stB >= at then
  local tokens, rem = stA + cost, stC
  if tokens >= limit then
    tokens, rem = limit, 0
  end
  redis.call('HSET', key, 'a', exact(tokens), 'c', exact(rem))
  done = 1
end
