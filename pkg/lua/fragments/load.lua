-- fragments/load.lua: read one state hash (docs/algorithms.md, "Lua hash
-- fields"). In: key, alg, policy, rev. Out: st — nil (no hash), false
-- (incompatible) or true — and stLast, stA, stB, stC (the numbers; 0 when
-- st is nil, unset when false) and, for a sliding log, stL (its field l,
-- '' when it has none, which its step checks; unset for the others). One HMGET; EXISTS only when no field is
-- present (a hash of foreign fields is incompatible, not empty); a key of
-- another type is incompatible. rev, last, a, b, c must be canonical
-- decimal integers, rev the request's and the others below 2^53; a sliding
-- window's counts above any sliding limit cannot be ours and would leave
-- exact arithmetic.
do
  st = false
  local h
  if alg == 'sliding_log' then
    h = redis.pcall('HMGET', key, 'schema', 'alg', 'policy', 'rev', 'last', 'a', 'b', 'c', 'l')
  else
    h = redis.pcall('HMGET', key, 'schema', 'alg', 'policy', 'rev', 'last', 'a', 'b', 'c')
  end
  if h.err then
    -- Not a hash: incompatible.
  elseif h[1] == SCHEMA and h[2] == alg and h[3] == policy then
    -- Parsed in place; "0" and "1" (c, small counts, the usual revision)
    -- need no pattern match and no strtod. A missing field is false. More
    -- than 16 digits is above 2^53-1, refused below.
    local ok = true
    for f = 4, 8 do
      local s = h[f]
      if s == '0' then
        h[f] = 0
      elseif s == '1' then
        h[f] = 1
      elseif s and find(s, DECIMAL) then
        h[f] = s + 0
      else
        ok = false
        break
      end
    end
    if ok and h[4] == rev and h[5] <= MAX and h[6] <= MAX and h[7] <= MAX and h[8] <= MAX then
      st, stLast, stA, stB, stC = true, h[5], h[6], h[7], h[8]
      if alg == 'sliding_window' and (stB > MAX_SLIDING or stC > MAX_SLIDING) then
        st = false
      elseif alg == 'sliding_log' then
        -- Its log, checked where the step reads it.
        stL = h[9] or ''
      end
    end
  elseif not (h[1] or h[2] or h[3] or h[4] or h[5] or h[6] or h[7] or h[8]) then
    if redis.call('EXISTS', key) == 0 then
      st, stLast, stA, stB, stC = nil, 0, 0, 0, 0
    end
  end
end
-- End of load.lua.
