-- fragments/sliding-window.lua: the sliding-window counter of
-- docs/algorithms.md, once, in three sections: valid, an inline block of a
-- program's keyArgs; step and refund, functions.
-- Approximate, conservative: weights round up. Its state: epoch, the
-- window id; level, the units of that window; carry, those of the window
-- before. (Counts above any sliding limit are refused where the state is
-- read.)
-- #section valid
-- uses: MAX_SLIDING
-- in: valid, ceiling, p2, p3
-- out: valid
-- Its argument rules (limiter.NewPolicy): the ceiling (the limit, twice it
-- for a charge) and window (p2) times the scale S stay below 2^53.
valid = valid and p3 == 0 and ceiling <= MAX_SLIDING and p2 >= 1 and p2 <= MAX_SLIDING
-- #section step
-- uses: S, fmod
-- defines: slidingNeed, slidingWindowStep

-- slidingNeed is how long after the start of a window, at the earliest, p
-- units of the window before (weighted by what of it still overlaps) plus
-- q plus cost fit limit: window when they never do in this window.
local function slidingNeed(p, q, limit, window, cost)
  local k = limit - q - cost
  if k < 0 then
    return window
  elseif p == 0 then
    return 0
  end
  local x = k * S
  local wmax = (x - fmod(x, p)) / p
  -- wmax >= S: the full weight fits (also keeps wmax * window exact).
  if wmax >= S then
    return 0
  end
  x = wmax * window
  local ep = window - (x - fmod(x, S)) / S
  if ep < 0 then
    return 0
  end
  return ep
end

-- slidingWindowStep is limiter.Check of a sliding window: a state (st
-- true, with epoch, level, carry; nil none) at now, for limit per window
-- ms, the grace and the cost. It returns what fixedWindowStep returns.
local function slidingWindowStep(st, epoch, level, carry, now, limit, window, grace, cost)
  local e = fmod(now, window)
  local w = (now - e) / window
  local cur, prev = 0, 0
  if st then
    if epoch == w then
      cur, prev = level, carry
    elseif epoch == w - 1 then
      prev = level
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
  local remainingBefore = limit - (prevPart + cur)
  -- When the estimate returns to 0 without traffic.
  local resetBefore = now
  if cur > 0 then
    resetBefore = (w + 2) * window
  elseif prev > 0 then
    resetBefore = (w + 1) * window
  end
  if cost <= remainingBefore then
    cur = cur + cost
    local remaining = limit - (prevPart + cur)
    if remaining < 0 then
      remaining = 0
    end
    return true, w, cur, prev, (w + 2) * window - now + grace, remaining, 0, (w + 2) * window,
      remainingBefore, resetBefore
  end
  if remainingBefore < 0 then
    remainingBefore = 0
  end
  -- Retry when it fits in this window: need(prev, cur) - e; else in the
  -- next one, where prev is cur: (window - e) + need(cur, 0).
  local retry
  if limit - cur - cost < 0 then
    retry = window - e + slidingNeed(cur, 0, limit, window, cost)
  else
    retry = slidingNeed(prev, cur, limit, window, cost) - e
  end
  if retry < 1 then
    retry = 1
  end
  return false, 0, 0, 0, 0, remainingBefore, retry, resetBefore, remainingBefore, resetBefore
end
-- #section refund
-- uses: fmod, max
-- defines: slidingWindowRefund

-- slidingWindowRefund gives back cost taken at effective time at: in the
-- same window, level -= cost; in the next one, carry -= cost (never below
-- 0). It returns whether it gave back, and the state.
local function slidingWindowRefund(epoch, level, carry, window, cost, at)
  local w = (at - fmod(at, window)) / window
  if epoch == w then
    return true, epoch, max(0, level - cost), carry
  elseif epoch == w + 1 then
    return true, epoch, level, max(0, carry - cost)
  end
  return false, epoch, level, carry
end
-- End of sliding-window.lua.
