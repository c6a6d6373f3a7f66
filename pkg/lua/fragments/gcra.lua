-- fragments/gcra.lua: the generic cell rate algorithm of docs/algorithms.md,
-- once, in three sections, each included at one dispatch point of a program.
-- The state is one time, the theoretical arrival time (TAT): b its whole
-- ms, c its fraction in units of 1/amount ms (a is 0). The emission
-- interval is period/amount ms, so in those units one unit of cost is
-- period and the tolerance burst * period: every comparison is of exact
-- integers.
--   valid   (rate-batch-v1.lua) its argument rules, as limiter.NewPolicy:
--           burst * period + amount stays below 2^53.
--           In: valid (the common rules of valid.lua), limit (burst), p2
--           (amount), p3 (period ms), as unpacked: doubles, any value.
--           Out: valid.
--   step    (rate-batch-v1.lua) limiter.Check as a block.
--           In:  st, stB (TAT ms), stC (TAT fraction); now; limit (the
--                burst), p2 (amount), p3 (period); grace, cost.
--           Out: allowed; a, b, c, ttl (the state to write when allowed);
--                remaining, retry, resetAt (the reply); remainingBefore, resetBefore
--                (remaining and reset-at before the cost).
--   refund  (rate-refund-v1.lua) give back cost taken at effective time
--           at: when the state was last written at or after at, the TAT
--           moves back by cost intervals, not before the time of that
--           write (then with no fraction).
--           In: key, stLast, stB, stC (a compatible state), p2, p3, cost,
--           at; the program's exact. Out: done, 1 when it wrote.
-- #section valid
valid = valid and p2 >= 1 and p2 <= MAX and p3 >= 1 and p3 <= MAX_DURATION
  and limit <= (MAX - p2 - fmod(MAX - p2, p3)) / p3
-- #section step
do
  local amount, period = p2, p3
  local full = limit * period
  -- d: how far the TAT is ahead of now, in units, at most full (a TAT
  -- further ahead, left by a lowered burst, is a full tolerance; a
  -- fraction of another rate counts as amount - 1).
  local d = 0
  if st and stB >= now then
    local dms = stB - now
    if dms > (full - fmod(full, amount)) / amount then
      d = full
    else
      local f = stC
      if f >= amount then
        f = amount - 1
      end
      d = dms * amount + f
      if d > full then
        d = full
      end
    end
  end
  local room = full - d
  remainingBefore = (room - fmod(room, period)) / period
  local r = fmod(d, amount)
  resetBefore = now + (d - r) / amount
  if r ~= 0 then
    resetBefore = resetBefore + 1
  end
  allowed = cost * period <= room
  if allowed then
    d = d + cost * period
    room = full - d
    r = fmod(d, amount)
    local q = (d - r) / amount
    local fullAfter = q
    if r ~= 0 then
      fullAfter = q + 1
    end
    a, b, c, ttl = 0, now + q, r, fullAfter + grace
    remaining, retry, resetAt = (room - fmod(room, period)) / period, 0, now + fullAfter
  else
    local x = cost * period - room
    r = fmod(x, amount)
    retry = (x - r) / amount
    if r ~= 0 then
      retry = retry + 1
    end
    remaining, resetAt = remainingBefore, resetBefore
  end
end
-- #section refund
if p3 >= 1 and stLast >= at then
  local x = cost * p3
  local xr = fmod(x, p2)
  local tat, f = stB - (x - xr) / p2, stC - xr
  if f < 0 then
    tat, f = tat - 1, f + p2
  end
  if tat < stLast then
    tat, f = stLast, 0
  end
  redis.call('HSET', key, 'b', exact(tat), 'c', exact(f))
  done = 1
end
