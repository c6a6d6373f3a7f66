-- fragments/penalty.lua: a limit's penalty box (limiter.Penalty,
-- docs/algorithms.md "Penalty box"), once, in three sections, each included
-- at one point of rate-batch-v1.lua:
--   valid   its extension of the key's packed argument, when the flags'
--           penalty bit (16) is set: struct.pack('>ddd') after the fixed
--           struct: duration ms, max duration ms, decay ms.
--           In: valid, packed (the key's packed argument), pos (where the
--           fixed struct ended), flags, limit. Out: pen (true when the key
--           has a penalty), penDur, penMax, penDecay; valid; pos (after the
--           extension, where the calendar extension starts).
--   load    the hash's penalty fields, after load.lua.
--           In: key, st. Out: stPu (when the last block ends, effective
--           ms; 0 none), stPn (the offence level; 0 none); st false when
--           either is not a canonical decimal below 2^53.
--   step    after the algorithm's step, for a compatible state (st true):
--           a blocked subject is BLOCKED (remaining 0, retry until the
--           block ends, reset at the later of the block's end and the
--           algorithm's reset) and writes nothing; a denial of a key that
--           records offences (an ordinary, shadow or quota key, role < 3,
--           never a check or probe key; a hash that existed before this
--           program) is an offence: its pu and pn, and the hash's expiry
--           raised to cover the block and its decay, go to offences, which
--           the program writes once every key of the request has been
--           evaluated (whatever the request commits; nothing when the
--           request raises), and the reply waits for the block. An allowed
--           key's ttl covers a remembered penalty.
--           In: pen, penDur, penMax, penDecay, st, stPu, stPn, fresh, role,
--           key, now, serverNow, grace, allowed, retry, resetAt,
--           resetBefore, ttl, offences (false or the request's offences,
--           four values each: key, pu, pn, expiry ms). Out: status
--           ('BLOCKED' or false), allowed, remaining, retry, resetAt, ttl,
--           stPu, stPn (after an offence), offences.
-- #section valid
pen = false
if bit.band(flags, PENALTY) ~= 0 then
  pen = true
  -- The extension ends the argument, unless the calendar extension
  -- follows it (calendar.lua checks that one's length from pos).
  if #packed < pos + 23 or #packed ~= pos + 23 and bit.band(flags, CALENDAR) == 0 then
    valid = false
  else
    penDur, penMax, penDecay, pos = unpack('>ddd', packed, pos)
    valid = valid and limit >= 1
      and penDur >= 1 and penDur <= MAX_PENALTY and penDur % 1 == 0
      and penMax >= penDur and penMax <= MAX_PENALTY and penMax % 1 == 0
      and penDecay >= 0 and penDecay <= MAX_PENALTY and penDecay % 1 == 0
  end
  flags = flags - PENALTY
end
-- #section load
stPu, stPn = 0, 0
if st then
  local h = redis.call('HMGET', key, 'pu', 'pn')
  if h[1] or h[2] then
    if h[1] and h[2] and find(h[1], DECIMAL) and find(h[2], DECIMAL) and #h[1] <= 16 and #h[2] <= 2 then
      stPu, stPn = h[1] + 0, h[2] + 0
      if stPu > MAX then
        st = false
      end
    else
      st = false
    end
  end
end
-- #section step
status = false
if stPu > now then
  status, remaining, retry = 'BLOCKED', 0, stPu - now
  if allowed then
    resetAt = resetBefore
  end
  if resetAt < stPu then
    resetAt = stPu
  end
  allowed = false
elseif not allowed then
  if role < 3 and not fresh then
    local level, block = 1, penDur
    if stPn > 0 and now < stPu + penDecay then
      level = stPn + 1
      if level > 63 then
        level = 63
      end
    end
    for _ = 2, level do
      if block >= penMax then
        break
      end
      block = block * 2
    end
    if block > penMax then
      block = penMax
    end
    stPu, stPn = now + block, level
    -- Written once every key of the request has been evaluated (so that a
    -- request that raises writes no offence): key, pu, pn, the expiry.
    local px = stPu + penDecay + grace - serverNow
    if not (stPu <= MAX and px <= MAX) then
      error('envoy-rls: inexact value')
    end
    if not offences then
      offences = {}
    end
    local o = #offences
    offences[o + 1], offences[o + 2], offences[o + 3], offences[o + 4] = key, stPu, level, px
    if retry < block then
      retry = block
    end
    if resetAt < stPu then
      resetAt = stPu
    end
  end
elseif stPn > 0 and ttl < stPu + penDecay + grace - now then
  ttl = stPu + penDecay + grace - now
end
