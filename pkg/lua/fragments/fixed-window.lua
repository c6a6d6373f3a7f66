-- fragments/fixed-window.lua: the fixed window of docs/algorithms.md, once:
-- limiter.Check as a block, included where a program evaluates a key.
-- In:  st, stA (window id), stB (consumed); now; limit, window; grace, cost.
-- Out: allowed; a, b, c, ttl (the state to write when allowed); remaining,
--      retry, resetAt (the reply); held, heldReset (remaining and reset-at
--      before the cost: an allowed request whose batch does not commit).
do
  local w = (now - fmod(now, window)) / window
  local windowEnd = (w + 1) * window
  local consumed = 0
  if st and stA == w then
    consumed = stB
  end
  held, heldReset, resetAt = limit - consumed, windowEnd, windowEnd
  allowed = cost <= held
  if allowed then
    a, b, c, ttl, remaining, retry = w, consumed + cost, 0, windowEnd - now + grace, held - cost, 0
  else
    -- A lowered limit can leave more consumed than the limit: remaining is 0.
    if held < 0 then
      held = 0
    end
    remaining, retry = held, windowEnd - now
  end
end
-- End of fixed-window.lua.
