-- fragments/sliding-log.lua: the sliding log of docs/algorithms.md, once,
-- in three sections, each included at one dispatch point of a program.
-- The state is the log of the hits in the window, in the hash field l:
-- one struct.pack('>dH') per hit (its effective time in ms, its cost),
-- oldest first, hits of one ms in one entry (limiter.State.Log); a is the
-- window id (epoch-aligned windows of the limit's window) of the last
-- write, b the units of the log in that window, c the rest (the window
-- before). The step checks the log as it reads it (a log that cannot be
-- ours is STATE_INCOMPATIBLE, after the clock rule, as limiter.Check); a
-- state without one (no l) holds c units at the last ms of window a - 1
-- and b at the last ms of window a, neither after now (the memory store's
-- estimates; never written here).
--   valid   (rate-batch-v1.lua) its argument rules, as limiter.NewPolicy:
--           the limit at most MAX_LOG.
--           In: valid (the common rules of valid.lua), limit, p2 (window
--           ms), p3 (0), as unpacked: doubles, any value. Out: valid.
--   step    (rate-batch-v1.lua) limiter.Check as a block: the hits of
--           (now - window, now] count exactly.
--           In:  st, stA, stB, stC, stL (the log); now; limit, p2
--                (window); grace, cost.
--           Out: st false when the log cannot be ours (then nothing
--                else); allowed; a, b, c, l, ttl (the state to write when
--                allowed: the log pruned to the window, the hit
--                appended); remaining, retry, resetAt (the reply);
--                remainingBefore, resetBefore (before the cost).
--   refund  (rate-refund-v1.lua) give back cost taken at effective time
--           at: the log's entry of that ms loses the cost (and is dropped
--           at 0), and the count of its window with it.
--           In: key, stA, stB, stC, stL (a compatible state), p2, cost,
--           at; the program's exact. Out: done, 1 when it wrote.
-- #section valid
valid = valid and p3 == 0 and p2 >= 1 and p2 <= MAX_DURATION and limit <= MAX_LOG
-- #section step
do
  local w, up, pack = p2, struct.unpack, struct.pack
  local lg, check = '', false
  -- limiter's validLog, as the log is read (after the clock rule): whole
  -- entries, at most MAX_LOG, counts at most MAX_LOG; a log-less state's
  -- window below 2^53 ms; each entry checked in the pass below.
  if st then
    lg = stL
    local n = #lg / 10
    if n % 1 ~= 0 or n > MAX_LOG or stB > MAX_LOG or stC > MAX_LOG then
      st = false
    elseif lg ~= '' then
      check = true
    elseif stA > (MAX - fmod(MAX, w)) / w then
      st = false
    else
      -- Estimated counts: at the latest they can have been taken.
      if stC > 0 then
        local tc = stA * w - 1
        if tc > now then
          tc = now
        elseif tc < 0 then
          tc = 0
        end
        lg = pack('>dH', tc, stC)
      end
      if stB > 0 then
        local tl = (stA + 1) * w - 1
        if tl > now then
          tl = now
        end
        lg = lg .. pack('>dH', tl, stB)
      end
    end
  end
  -- One pass: the units in the window, those in now's epoch-aligned
  -- window, where the window's hits start (byte offset), the newest hit.
  local epochStart = now - fmod(now, w)
  local since = now - w
  local used, level, from, lastT, lastC = 0, 0, #lg + 1, false, 0
  local pos, prev = 1, 0
  if st ~= false then
    for _ = 1, #lg / 10 do
      local t, k, nx = up('>dH', lg, pos)
      if check then
        if not (t >= prev and t <= stLast and t % 1 == 0 and k >= 1) then
          st = false
          break
        end
        prev = t
      end
      if t > since then
        if used == 0 then
          from = pos
        end
        used = used + k
        if t >= epochStart then
          level = level + k
        end
        lastT, lastC = t, k
      end
      pos = nx
    end
  end
  if st ~= false then
    remainingBefore, resetBefore = limit - used, now
    if lastT then
      resetBefore = lastT + w
    end
    allowed = cost <= limit - used
    if allowed then
      if lastT == now then
        l = string.sub(lg, from, #lg - 10) .. pack('>dH', now, lastC + cost)
      else
        l = string.sub(lg, from) .. pack('>dH', now, cost)
      end
      a, b, c, ttl = (now - fmod(now, w)) / w, level + cost, used - level, w + grace
      remaining, retry, resetAt = limit - used - cost, 0, now + w
    else
      if remainingBefore < 0 then
        remainingBefore = 0
      end
      remaining, resetAt = remainingBefore, resetBefore
      -- The hits leave oldest first: the first time the rest leave room.
      retry = resetBefore - now
      if retry < 1 then
        retry = 1
      end
      local freed = 0
      pos = from
      while pos <= #lg do
        local t, k, nx = up('>dH', lg, pos)
        freed = freed + k
        if used - freed <= limit - cost then
          retry = t + w - now
          break
        end
        pos = nx
      end
    end
  end
end
-- #section refund
if stL ~= '' and #stL % 10 == 0 and #stL <= 10 * MAX_LOG then
  local up, n, pos, found = struct.unpack, #stL / 10, 1, false
  for _ = 1, n do
    local t, k = up('>dH', stL, pos)
    if t == at then
      found = true
      break
    end
    pos = pos + 10
  end
  if found then
    local t, k = up('>dH', stL, pos)
    local back = cost
    if back > k then
      back = k
    end
    local entry = ''
    if k > back then
      entry = struct.pack('>dH', t, k - back)
    end
    local nb, nc = stB, stC
    local wa = (at - fmod(at, p2)) / p2
    if wa == stA then
      nb = max(0, nb - back)
    elseif wa == stA - 1 then
      nc = max(0, nc - back)
    end
    redis.call('HSET', key, 'l', string.sub(stL, 1, pos - 1) .. entry .. string.sub(stL, pos + 10),
      'b', exact(nb), 'c', exact(nc))
    done = 1
  end
end
