-- fragments/sliding-window.lua: the sliding-window counter of
-- docs/algorithms.md, once. Approximate, conservative: weights round up.
local function sliding_window_valid(limit, window)
  return limit <= MAX_SLIDING and window >= 1 and window <= MAX_SLIDING
end

-- Counts above the largest sliding limit cannot be ours, and would leave
-- exact arithmetic in the weighted estimate.
local function sliding_window_compatible(st)
  return not st or (st.b <= MAX_SLIDING and st.c <= MAX_SLIDING)
end

local function sliding_reset(now, w, window, prev, cur)
  if cur > 0 then
    return (w + 2) * window
  elseif prev > 0 then
    return (w + 1) * window
  end
  return now
end

local function sliding_window(st, now, limit, window, _, grace, cost)
  local w = idiv(now, window)
  local e = now - w * window
  local cur, prev = 0, 0
  if st then
    if st.a == w then
      cur, prev = st.b, st.c
    elseif st.a == w - 1 then
      prev = st.b
    end
  end
  local weight = ceildiv((window - e) * S, window)
  local prevPart = ceildiv(prev * weight, S)
  local estimate = prevPart + cur
  if cost <= limit - estimate then
    local held, heldReset = limit - estimate, sliding_reset(now, w, window, prev, cur)
    cur = cur + cost
    local remaining = limit - (prevPart + cur)
    if remaining < 0 then
      remaining = 0
    end
    return true, w, cur, prev, (w + 2) * window - now + grace, remaining, 0, (w + 2) * window, held, heldReset
  end
  local remaining = limit - estimate
  if remaining < 0 then
    remaining = 0
  end
  -- need(p, c): the least elapsed e' in [0, window] at which p weighted plus
  -- c plus cost fits the limit (window when it never does in this window).
  local function need(p, c)
    local k = limit - c - cost
    if k < 0 then
      return window
    end
    if p == 0 then
      return 0
    end
    local wmax = idiv(k * S, p)
    if wmax >= S then
      return 0 -- the full weight fits; also keeps wmax * window exact
    end
    local ep = window - idiv(wmax * window, S)
    if ep < 0 then
      ep = 0
    end
    return ep
  end
  local retry
  if limit - cur - cost >= 0 then
    retry = need(prev, cur) - e
  else
    retry = (window - e) + need(cur, 0)
  end
  if retry < 1 then
    retry = 1
  end
  local resetAt = sliding_reset(now, w, window, prev, cur)
  return false, 0, 0, 0, 0, remaining, retry, resetAt, remaining, resetAt
end
-- End of sliding-window.lua.
