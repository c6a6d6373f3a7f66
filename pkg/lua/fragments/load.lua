-- fragments/load.lua: read one state hash (docs/algorithms.md, "Lua hash
-- fields"). In: key, alg, policy, rev, p2 (a sliding log's window). Out:
-- st — nil (no hash), false (incompatible) or true — and stLast, stA, stB,
-- stC (the numbers; 0 when st is nil, unset when false) and, for a sliding
-- log, stL (its log, '' when it has none; unset for the others). One HMGET; EXISTS only when no field is
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
        -- limiter's validLog: whole entries, at most MAX_LOG, times
        -- integral, in order, not after last, costs at least 1; counts
        -- at most MAX_LOG; a log-less state's window not after last.
        stL = h[9] or ''
        local n = #stL / 10
        if n % 1 ~= 0 or n > MAX_LOG or stB > MAX_LOG or stC > MAX_LOG then
          st = false
        elseif n == 0 then
          if (stB > 0 or stC > 0) and stA > (stLast - fmod(stLast, p2)) / p2 then
            st = false
          end
        else
          local up, pos, prev = struct.unpack, 1, 0
          for _ = 1, n do
            local t, k
            t, k, pos = up('>dH', stL, pos)
            if not (t >= prev and t <= stLast and t % 1 == 0 and k >= 1) then
              st = false
              break
            end
            prev = t
          end
        end
      end
    end
  elseif not (h[1] or h[2] or h[3] or h[4] or h[5] or h[6] or h[7] or h[8]) then
    if redis.call('EXISTS', key) == 0 then
      st, stLast, stA, stB, stC = nil, 0, 0, 0, 0
    end
  end
end
-- End of load.lua.
