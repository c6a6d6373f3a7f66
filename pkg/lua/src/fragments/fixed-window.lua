-- fragments/fixed-window.lua: the fixed window of docs/algorithms.md, once,
-- in three sections: valid, an inline block of a
-- program's keyArgs; step and refund, functions, included where a program needs
-- them. Its state (limiter.State): epoch, the window id (a calendar
-- window: its period's start); level, the units consumed in it; carry 0.
-- #section valid
-- uses: MAX_DURATION
-- in: valid, p2, p3
-- out: valid
-- Its argument rules (limiter.NewPolicy), of the unpacked numbers: limit,
-- window ms (p2), 0 (p3).
valid = valid and p3 == 0 and p2 >= 1 and p2 <= MAX_DURATION
-- #section step
-- uses: fmod
-- defines: fixedWindowStep

-- fixedWindowStep is limiter.Check of a fixed window: a state (st true,
-- with epoch and level; nil none) at now, for limit per window ms (or,
-- when cal, the calendar period among [cb0, cb1), [cb1, cb2), [cb2, cb3)
-- that holds now), the cleanup grace and the cost. It returns allowed; the
-- state to write when allowed (epoch, level, carry) and its ttl; the reply
-- (remaining, retry, resetAt); and the reply before the cost
-- (remainingBefore, resetBefore: an allowed request whose batch does not
-- commit).
local function fixedWindowStep(st, epoch, level, now, limit, window, grace, cost, cal, cb0, cb1, cb2, cb3)
  local w, windowEnd
  if not cal then
    w = (now - fmod(now, window)) / window
    windowEnd = (w + 1) * window
  elseif now < cb1 then
    w, windowEnd = cb0, cb1
  elseif now < cb2 then
    w, windowEnd = cb1, cb2
  else
    w, windowEnd = cb2, cb3
  end
  local consumed = 0
  if st and epoch == w then
    consumed = level
  end
  local remainingBefore = limit - consumed
  if cost <= remainingBefore then
    return true, w, consumed + cost, 0, windowEnd - now + grace, remainingBefore - cost, 0, windowEnd,
      remainingBefore, windowEnd
  end
  -- A lowered limit can leave more consumed than the limit: remaining is 0.
  if remainingBefore < 0 then
    remainingBefore = 0
  end
  return false, 0, 0, 0, 0, remainingBefore, windowEnd - now, windowEnd, remainingBefore, windowEnd
end
-- #section refund
-- uses: fmod, max
-- defines: fixedWindowRefund

-- fixedWindowRefund gives back cost taken at effective time at: in the
-- same window, level -= cost (never below 0). window is the window ms and
-- periodLen 0, or for a calendar window the end and the length of the
-- period holding at. It returns whether it gave back, and the state.
local function fixedWindowRefund(epoch, level, carry, window, periodLen, cost, at)
  if periodLen == 0 and epoch == (at - fmod(at, window)) / window
    or periodLen ~= 0 and epoch == window - periodLen and at >= window - periodLen and at < window then
    return true, epoch, max(0, level - cost), carry
  end
  return false, epoch, level, carry
end
-- End of fixed-window.lua.
