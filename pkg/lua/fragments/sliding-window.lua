-- fragments/sliding-window.lua: the sliding-window counter of
-- docs/algorithms.md, once, in three sections, each included at one
-- dispatch point of a program. Approximate, conservative: weights round up.
-- (Counts above any sliding limit are refused by load.lua.)
--   valid   (rate-batch-v1.lua) its argument rules, as limiter.NewPolicy:
--           limit and window times the scale S stay below 2^53.
--           In: valid (the common rules of valid.lua), limit, p2 (window
--           ms), p3 (0), as unpacked: doubles, any value. Out: valid.
--   step    (rate-batch-v1.lua) limiter.Check as a block.
--           In:  st, stA (window id), stB (current), stC (previous); now;
--                limit, p2 (window); grace, cost.
--           Out: allowed; a, b, c, ttl (the state to write when allowed);
--                remaining, retry, resetAt (the reply); remainingBefore, resetBefore
--                (remaining and reset-at before the cost).
--   refund  (rate-refund-v1.lua) give back cost taken at effective time
--           at: in the same window, current -= cost; in the next one,
--           previous -= cost.
--           In: key, stA, stB, stC (a compatible state), p2, cost, at;
--           the program's exact and max. Out: done, 1 when it wrote.
-- #section valid
valid = valid and p3 == 0 and limit <= MAX_SLIDING and p2 >= 1 and p2 <= MAX_SLIDING
-- #section step
do
  local window = p2
  local e = fmod(now, window)
  local w = (now - e) / window
  local cur, prev = 0, 0
  if st then
    if stA == w then
      cur, prev = stB, stC
    elseif stA == w - 1 then
      prev = stB
    end
  end
  -- weight = ceil((window - e) * S, window), prevPart = ceil(prev * weight, S)
  local x = (window - e) * S
  local r = fmod(x, window)
  local weight = (x - r) / window
  if r ~= 0 then
    weight = weight + 1
  end
  x = prev * weight
  r = fmod(x, S)
  local prevPart = (x - r) / S
  if r ~= 0 then
    prevPart = prevPart + 1
  end
  remainingBefore = limit - (prevPart + cur)
  -- When the estimate returns to 0 without traffic.
  if cur > 0 then
    resetBefore = (w + 2) * window
  elseif prev > 0 then
    resetBefore = (w + 1) * window
  else
    resetBefore = now
  end
  allowed = cost <= remainingBefore
  if allowed then
    cur = cur + cost
    remaining = limit - (prevPart + cur)
    if remaining < 0 then
      remaining = 0
    end
    a, b, c, ttl, retry, resetAt = w, cur, prev, (w + 2) * window - now + grace, 0, (w + 2) * window
  else
    if remainingBefore < 0 then
      remainingBefore = 0
    end
    remaining, resetAt = remainingBefore, resetBefore
    -- need(p, q): the least elapsed e' in [0, window] at which p weighted
    -- plus q plus cost fits the limit (window when it never does in this
    -- window). Retry when it fits in this window: need(prev, cur) - e;
    -- else in the next one, where prev is cur: (window - e) + need(cur, 0).
    local p, q, base = prev, cur, -e
    if limit - cur - cost < 0 then
      p, q, base = cur, 0, window - e
    end
    local k = limit - q - cost
    local ep = 0
    if k < 0 then
      ep = window
    elseif p ~= 0 then
      x = k * S
      r = fmod(x, p)
      local wmax = (x - r) / p
      -- wmax >= S: the full weight fits (also keeps wmax * window exact).
      if wmax < S then
        x = wmax * window
        r = fmod(x, S)
        ep = window - (x - r) / S
        if ep < 0 then
          ep = 0
        end
      end
    end
    retry = ep + base
    if retry < 1 then
      retry = 1
    end
  end
end
-- #section refund
do
  local w = (at - fmod(at, p2)) / p2
  if stA == w then
    redis.call('HSET', key, 'b', exact(max(0, stB - cost)))
    done = 1
  elseif stA == w + 1 then
    redis.call('HSET', key, 'c', exact(max(0, stC - cost)))
    done = 1
  end
end
