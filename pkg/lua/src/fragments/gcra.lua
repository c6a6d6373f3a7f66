-- fragments/gcra.lua: the generic cell rate algorithm of docs/algorithms.md,
-- once, in three sections: valid, an inline block of a
-- program's keyArgs; step and refund, functions. Its state is one time,
-- the theoretical arrival time (TAT): epoch its whole ms, carry its
-- fraction in units of 1/amount ms; level 0. The emission interval is
-- period/amount ms, so in those units one unit of cost is period and the
-- tolerance burst * period: every comparison is of exact integers.
-- #section valid
-- uses: MAX, MAX_DURATION, fmod
-- in: valid, ceiling, p2, p3
-- out: valid
-- Its argument rules (limiter.NewPolicy): the burst (limit), amount (p2)
-- and period ms (p3); the ceiling (the burst, twice it for a charge) *
-- period + amount stays below 2^53.
valid = valid and p2 >= 1 and p2 <= MAX and p3 >= 1 and p3 <= MAX_DURATION
  and ceiling <= (MAX - p2 - fmod(MAX - p2, p3)) / p3
-- #section step
-- uses: fmod, ceilDiv
-- defines: gcraStep

-- gcraStep is limiter.Check of GCRA: a state (st true, with epoch and
-- carry; nil none) at now, for a burst of limit and amount per period ms,
-- the grace, the cost and the ceiling (the burst, twice it for a charge).
-- It returns what fixedWindowStep returns.
local function gcraStep(st, epoch, carry, now, limit, amount, period, grace, cost, ceiling)
  local full, most = limit * period, ceiling * period
  -- d: how far the TAT is ahead of now, in units, at most the ceiling's
  -- (a TAT further ahead, left by a lowered burst, is a full tolerance; a
  -- fraction of another rate counts as amount - 1).
  local d = 0
  if st and epoch >= now then
    local dms = epoch - now
    if dms > (most - fmod(most, amount)) / amount then
      d = most
    else
      local f = carry
      if f >= amount then
        f = amount - 1
      end
      d = dms * amount + f
      if d > most then
        d = most
      end
    end
  end
  local room = full - d
  -- A TAT in debt (a charge) leaves less than nothing.
  local remainingBefore = 0
  if room > 0 then
    remainingBefore = (room - fmod(room, period)) / period
  end
  local resetBefore = now + ceilDiv(d, amount)
  if cost * period <= room then
    d = d + cost * period
    room = full - d
    local r = fmod(d, amount)
    local q = (d - r) / amount
    local fullAfter = ceilDiv(d, amount)
    return true, now + q, 0, r, fullAfter + grace, (room - fmod(room, period)) / period, 0, now + fullAfter,
      remainingBefore, resetBefore
  end
  return false, 0, 0, 0, 0, remainingBefore, ceilDiv(cost * period - room, amount), resetBefore,
    remainingBefore, resetBefore
end
-- #section refund
-- uses: fmod
-- defines: gcraRefund

-- gcraRefund gives back cost taken at effective time at: when the state
-- was last written (lastObservedMs) at or after at, the TAT moves back by
-- cost intervals, not before the time of that write (then with no
-- fraction). amount and period are the policy's. It returns whether it
-- gave back, and the state.
local function gcraRefund(lastObservedMs, epoch, level, carry, amount, period, cost, at)
  if period < 1 or lastObservedMs < at then
    return false, epoch, level, carry
  end
  local x = cost * period
  local xr = fmod(x, amount)
  local tat, f = epoch - (x - xr) / amount, carry - xr
  if f < 0 then
    tat, f = tat - 1, f + amount
  end
  if tat < lastObservedMs then
    tat, f = lastObservedMs, 0
  end
  return true, tat, level, f
end
-- End of gcra.lua.
