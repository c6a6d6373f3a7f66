-- fragments/sliding-log.lua: the sliding log of docs/algorithms.md, once,
-- in three sections: valid, an inline block of a
-- program's keyArgs; step and refund, functions. Its state is the log of the
-- hits in the window: one struct.pack('>dH') per hit (its effective time
-- in ms, its cost), oldest first, hits of one ms in one entry
-- (limiter.State.Log); epoch is the window id (epoch-aligned windows of
-- the limit's window) of the last write, level the units of the log in
-- that window, carry the rest (the window before). The step checks the
-- log as it reads it (a log that cannot be ours is STATE_INCOMPATIBLE,
-- after the clock rule, as limiter.Check); a state without one (log '')
-- holds carry units at the last ms of window epoch - 1 and level at the
-- last ms of window epoch, neither after now (the memory store's
-- estimates; never written here).
-- #section valid
-- uses: MAX_DURATION, MAX_LOG
-- in: valid, ceiling, p2, p3
-- out: valid
-- Its argument rules (limiter.NewPolicy): the ceiling (the limit, twice it
-- for a charge) at most MAX_LOG, the window ms (p2).
valid = valid and p3 == 0 and p2 >= 1 and p2 <= MAX_DURATION and ceiling <= MAX_LOG
-- #section step
-- uses: MAX, MAX_LOG, fmod, unpack, pack, sub
-- defines: slidingLogOf, slidingLogRetry, slidingLogStep

-- slidingLogOf is the log a state holds at now (limiter's validLog, as the
-- log is read): ok false when it cannot be ours (not whole entries, more
-- than MAX_LOG, counts above MAX_LOG, a log-less state's window at or
-- above 2^53 ms); check, when the entries are still to be checked (the
-- stored log: each in the step's pass).
local function slidingLogOf(epoch, level, carry, log, now, w)
  local n = #log / 10
  if n % 1 ~= 0 or n > MAX_LOG or level > MAX_LOG or carry > MAX_LOG then
    return false, '', false
  elseif log ~= '' then
    return true, log, true
  elseif epoch > (MAX - fmod(MAX, w)) / w then
    return false, '', false
  end
  -- Estimated counts: at the latest they can have been taken.
  local lg = ''
  if carry > 0 then
    local tc = epoch * w - 1
    if tc > now then
      tc = now
    elseif tc < 0 then
      tc = 0
    end
    lg = pack('>dH', tc, carry)
  end
  if level > 0 then
    local tl = (epoch + 1) * w - 1
    if tl > now then
      tl = now
    end
    lg = lg .. pack('>dH', tl, level)
  end
  return true, lg, false
end

-- slidingLogRetry: when a denied cost first fits, the hits leaving oldest
-- first from byte from of lg (used units in the window): the first time
-- the rest leave room, at least 1 ms.
local function slidingLogRetry(lg, from, used, limit, cost, now, w, resetBefore)
  local retry = resetBefore - now
  if retry < 1 then
    retry = 1
  end
  local freed, pos = 0, from
  while pos <= #lg do
    local t, k, nx = unpack('>dH', lg, pos)
    freed = freed + k
    if used - freed <= limit - cost then
      return t + w - now
    end
    pos = nx
  end
  return retry
end

-- slidingLogStep is limiter.Check of a sliding log: the hits of (now -
-- window, now] count exactly. A state (st true, with lastObservedMs,
-- epoch, level, carry, log; nil none) at now, for limit per window ms, the
-- grace and the cost. It returns incompatible (the log cannot be ours:
-- nothing else), the log to write (pruned to the window, the hit
-- appended), then what fixedWindowStep returns.
local function slidingLogStep(st, lastObservedMs, epoch, level, carry, log, now, limit, w, grace, cost)
  local lg, check = '', false
  if st then
    local ok
    ok, lg, check = slidingLogOf(epoch, level, carry, log, now, w)
    if not ok then
      return true
    end
  end
  -- One pass: the units in the window, those in now's epoch-aligned
  -- window, where the window's hits start (byte offset), the newest hit.
  local epochStart, since = now - fmod(now, w), now - w
  local used, inEpoch, from, lastT, lastC = 0, 0, #lg + 1, false, 0
  local pos, prev = 1, 0
  for _ = 1, #lg / 10 do
    local t, k, nx = unpack('>dH', lg, pos)
    if check then
      if not (t >= prev and t <= lastObservedMs and t % 1 == 0 and k >= 1) then
        return true
      end
      prev = t
    end
    if t > since then
      if used == 0 then
        from = pos
      end
      used = used + k
      if t >= epochStart then
        inEpoch = inEpoch + k
      end
      lastT, lastC = t, k
    end
    pos = nx
  end
  local remainingBefore, resetBefore = limit - used, now
  if lastT then
    resetBefore = lastT + w
  end
  if cost <= limit - used then
    local l
    if lastT == now then
      l = sub(lg, from, #lg - 10) .. pack('>dH', now, lastC + cost)
    else
      l = sub(lg, from) .. pack('>dH', now, cost)
    end
    return false, l, true, (now - fmod(now, w)) / w, inEpoch + cost, used - inEpoch, w + grace,
      limit - used - cost, 0, now + w, remainingBefore, resetBefore
  end
  if remainingBefore < 0 then
    remainingBefore = 0
  end
  local retry = slidingLogRetry(lg, from, used, limit, cost, now, w, resetBefore)
  return false, '', false, 0, 0, 0, 0, remainingBefore, retry, resetBefore, remainingBefore, resetBefore
end
-- #section refund
-- uses: MAX_LOG, fmod, unpack, pack, sub, max
-- defines: slidingLogRefund

-- slidingLogRefund gives back cost taken at effective time at: the log's
-- entry of that ms loses the cost (and is dropped at 0), and the count of
-- its window with it. It returns whether it gave back, the state and the
-- log.
local function slidingLogRefund(epoch, level, carry, log, window, cost, at)
  if log == '' or #log % 10 ~= 0 or #log > 10 * MAX_LOG then
    return false, epoch, level, carry, log
  end
  local pos, found = 1, false
  for _ = 1, #log / 10 do
    if unpack('>d', log, pos) == at then
      found = true
      break
    end
    pos = pos + 10
  end
  if not found then
    return false, epoch, level, carry, log
  end
  local t, k = unpack('>dH', log, pos)
  local back = cost
  if back > k then
    back = k
  end
  local entry = ''
  if k > back then
    entry = pack('>dH', t, k - back)
  end
  local wa = (at - fmod(at, window)) / window
  if wa == epoch then
    level = max(0, level - back)
  elseif wa == epoch - 1 then
    carry = max(0, carry - back)
  end
  return true, epoch, level, carry, sub(log, 1, pos - 1) .. entry .. sub(log, pos + 10)
end
-- End of sliding-log.lua.
