-- fragments/fixed-window.lua: the fixed window of docs/algorithms.md, once.
local function fixed_window_valid(limit, window)
  return limit <= MAX and window >= 1 and window <= MAX_DURATION
end

local function fixed_window(st, now, limit, window, _, grace, cost)
  local w = idiv(now, window)
  local windowEnd = (w + 1) * window
  local consumed = 0
  if st and st.a == w then
    consumed = st.b
  end
  if cost <= limit - consumed then
    local held = limit - consumed
    consumed = consumed + cost
    return true, w, consumed, 0, windowEnd - now + grace, limit - consumed, 0, windowEnd, held, windowEnd
  end
  -- A lowered limit can leave more consumed than the limit: remaining is 0.
  local remaining = limit - consumed
  if remaining < 0 then
    remaining = 0
  end
  return false, 0, 0, 0, 0, remaining, windowEnd - now, windowEnd, remaining, windowEnd
end
-- End of fixed-window.lua.
