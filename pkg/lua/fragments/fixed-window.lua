-- fragments/fixed-window.lua: the fixed window of docs/algorithms.md, once,
-- in three sections, each included at one dispatch point of a program:
--   valid   (rate-batch-v1.lua) its argument rules, as limiter.NewPolicy.
--           In: valid (the common rules of valid.lua), limit, p2 (window
--           ms), p3 (0), as unpacked: doubles, any value. Out: valid.
--   step    (rate-batch-v1.lua) limiter.Check as a block.
--           In:  st, stA (window id), stB (consumed); now; limit, p2
--                (window); grace, cost; cal and cb0..cb3 (a calendar
--                window: the period holding now is one of the three
--                calendar.lua checked, its id is its start).
--           Out: allowed; a, b, c, ttl (the state to write when allowed);
--                remaining, retry, resetAt (the reply); remainingBefore, resetBefore
--                (remaining and reset-at before the cost: an allowed
--                request whose batch does not commit).
--   refund  (rate-refund-v1.lua) give back cost taken at effective time
--           at: in the same window, consumed -= cost. p3 is 0 for an
--           epoch-aligned window; for a calendar window p2 is the end and
--           p3 the length of the period holding at.
--           In: key, stA, stB, stC (a compatible state), p2, p3, cost, at;
--           the program's exact and max. Out: done, 1 when it wrote.
-- #section valid
valid = valid and p3 == 0 and p2 >= 1 and p2 <= MAX_DURATION
-- #section step
do
  local w, windowEnd
  if not cal then
    local window = p2
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
  if st and stA == w then
    consumed = stB
  end
  remainingBefore, resetBefore, resetAt = limit - consumed, windowEnd, windowEnd
  allowed = cost <= remainingBefore
  if allowed then
    a, b, c, ttl, remaining, retry = w, consumed + cost, 0, windowEnd - now + grace, remainingBefore - cost, 0
  else
    -- A lowered limit can leave more consumed than the limit: remaining is 0.
    if remainingBefore < 0 then
      remainingBefore = 0
    end
    remaining, retry = remainingBefore, windowEnd - now
  end
end
-- #section refund
if p3 == 0 and stA == (at - fmod(at, p2)) / p2 or p3 ~= 0 and stA == p2 - p3 and at >= p2 - p3 and at < p2 then
  redis.call('HSET', key, 'b', exact(max(0, stB - cost)))
  done = 1
end
