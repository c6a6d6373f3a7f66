-- fragments/reserve.lua: a reserving policy's request (limiter.Reserve),
-- algorithm.CheckRequest: a reserve consumes its amount and holds a
-- reservation named by its identity (its expiry, ms); a settle removes
-- one and charges the usage's excess (as a charge: up to the ceiling) or
-- gives back its shortfall by the algorithm's refund rule at the
-- reservation's time. The reservations are the state's reserved section
-- (string-v2.lua): struct.pack('>dd', identity, amount) each, identities
-- ascending, at most MAX_RESERVATIONS held; a settled identity is kept,
-- last, with amount 0 while it could be issued again. Sections: args
-- (reserveArgs) and step (reservationStep).
-- #section args
-- uses: unpack, MAX, RESERVE, CALENDAR
-- defines: reserveArgs

-- reserveArgs reads the reservation extension of a key's packed argument,
-- when the flags' bit 128 is set: struct.pack('>ddddd') after the fixed
-- numbers and the penalty extension (which end at pos): rop (1 a
-- reserve, 2 a settle), the TTL ms, the settle's identity (0 none), the
-- policy's max cost and, for a calendar window's settle, the start of the
-- period holding the reservation's time (else 0). It returns valid, rop
-- (not false: a key with the bit replies an identity even when not
-- valid), the four numbers, pos after it (where
-- the calendar extension starts) and the flags without the bit. A
-- reservation has no penalty box, no sliding log (algorithm 5), a TTL up
-- to limiter.MaxLeaseTTL (24 hours) and a max cost up to the ceiling.
local function reserveArgs(packed, pos, flags, penalty, algorithm, ceiling)
  flags = flags - RESERVE
  -- The extension ends the argument, unless the calendar one follows
  -- (calendarArgs checks that one's length from pos).
  if penalty or #packed < pos + 39 or #packed ~= pos + 39 and flags % 64 < CALENDAR then
    return false, 0, 0, 0, 0, 0, pos, flags
  end
  local rop, rttl, rat, rmax, rstart
  rop, rttl, rat, rmax, rstart, pos = unpack('>ddddd', packed, pos)
  local valid = (rop == 1 and rat == 0 or rop == 2) and algorithm ~= 5
    and rttl >= 1 and rttl <= 86400000 and rttl % 1 == 0
    and rat >= 0 and rat <= MAX and rat % 1 == 0
    and rmax >= 1 and rmax <= ceiling and rmax % 1 == 0
    and rstart >= 0 and rstart <= MAX and rstart % 1 == 0
  return valid, rop, rttl, rat, rmax, rstart, pos, flags
end
-- #section step
-- uses: unpack, pack, sub, MAX, fmod, serverNow, algStep, chargeKey, fixedWindowRefund,
-- uses: slidingWindowRefund, gcraRefund, tokenBucketGiveBack, KEEP_EXPIRY
-- defines: MAX_RESERVATIONS, validReserved, sameWindow, settleRefund,
-- defines: liveReservations, unwritten, reservationStep

-- MAX_RESERVATIONS: limiter.MaxReservations, the reservations one state
-- holds; also how many ms after now + TTL an identity may be pushed to
-- stay after the last one (algorithm's maxShiftMs).
local MAX_RESERVATIONS = 64

-- validReserved: whole entries (decodeState checked the length), at most
-- MAX_RESERVATIONS, identities integers in [1, 2^53-1] ascending,
-- amounts integers in [1, maxCost] but the last's, which may be 0.
local function validReserved(res, maxCost)
  local n = #res / 16
  if n > MAX_RESERVATIONS then
    return false
  end
  local prev, pos = 0, 1
  for i = 1, n do
    local id, amount
    id, amount, pos = unpack('>dd', res, pos)
    local least = 1
    if i == n then
      least = 0
    end
    if not (id > prev and id <= MAX and id % 1 == 0 and amount >= least and amount <= maxCost and amount % 1 == 0) then
      return false
    end
    prev = id
  end
  return true
end

-- sameWindow: whether the times now and t (t >= now) fall in one window of
-- a window algorithm (a refund at one gives back what was taken at the
-- other); always for token bucket and GCRA.
local function sameWindow(alg, now, t, window, cal, cb1, cb2, cb3)
  if alg == 'fixed_window' and cal then
    local periodEnd = cb3
    if now < cb1 then
      periodEnd = cb1
    elseif now < cb2 then
      periodEnd = cb2
    end
    return t < periodEnd
  elseif alg == 'fixed_window' or alg == 'sliding_window' then
    return (now - fmod(now, window)) / window == (t - fmod(t, window)) / window
  end
  return true
end

-- settleRefund gives back cost taken at effective time at from the state
-- (lastObservedMs, epoch, level, carry) at now by the algorithm's refund
-- rule (a calendar window: when the state's period is rstart, the one
-- holding at). It returns the state (epoch, level, carry).
local function settleRefund(alg, lastObservedMs, epoch, level, carry, now, limit, ceiling, p2, p3, cost, at, cal,
                            rstart)
  local _, e, l, c
  if alg == 'fixed_window' then
    if not cal then
      _, e, l, c = fixedWindowRefund(epoch, level, carry, p2, 0, cost, at)
      return e, l, c
    elseif epoch == rstart then
      l = level - cost
      if l < 0 then
        l = 0
      end
      return epoch, l, carry
    end
    return epoch, level, carry
  elseif alg == 'sliding_window' then
    _, e, l, c = slidingWindowRefund(epoch, level, carry, p2, cost, at)
    return e, l, c
  elseif alg == 'token_bucket' then
    return tokenBucketGiveBack(epoch, level, carry, now, limit, p2, p3, ceiling, cost, at)
  end
  _, e, l, c = gcraRefund(lastObservedMs, epoch, level, carry, p2, p3, cost, at)
  return e, l, c
end

-- liveReservations returns the reservations of res whose identity is
-- after now, how many unsettled ones it dropped (expired) and the units
-- the live ones hold.
local function liveReservations(res, now)
  local live, expired, units = res, 0, 0
  while #live > 0 do
    local id, amount = unpack('>dd', live)
    if id > now then
      break
    elseif amount > 0 then
      expired = expired + 1
    end
    live = sub(live, 17)
  end
  for i = 1, #live / 16 do
    units = units + unpack('>d', live, i * 16 - 7)
  end
  return live, expired, units
end

-- unwritten is reservationStep's answer for a key that writes nothing:
-- the reply (remaining, retry, resetAt) is also the one before the cost,
-- and the reservations (their units: held) stay as they are.
local function unwritten(st, now, status, remaining, retry, resetAt, held)
  return st, now, status, false, 0, 0, 0, '', '', 0, remaining, retry, resetAt, remaining, resetAt, 0, held, held, 0
end

-- reservationStep is algorithm.CheckRequest of a reserve (rop 1) or a
-- settle (rop 2) of the reservation at rat (0: none) with the TTL rttl,
-- for a key of role, on a compatible state (st true; nil none; fresh: none
-- stored before this request) holding the reservations res, at the
-- effective now. It returns st (false: reservations that cannot be ours,
-- STATE_INCOMPATIBLE) and the effective now of the reply, the status,
-- write (true: on commit; 2: whatever the request commits; false), the
-- state to write (epoch, level, carry, log, reservations) and its ttl
-- (KEEP_EXPIRY: the stored expiry), the reply (remaining, retry,
-- resetAt), the reply before the cost (a reserve whose request does not
-- commit), the reserve's identity (hold, 0 none), the units the live
-- reservations hold after the request (held: before it when it does not
-- write), before it (heldBefore) and the reservations it dropped expired
-- (0 when it does not write).
-- A check or probe key (role 3 and above) replies what the request would
-- before it is taken, and writes nothing.
local function reservationStep(alg, st, fresh, lastObservedMs, epoch, level, carry, res, now, limit, ceiling, p2, p3,
                               grace, cost, cal, cb0, cb1, cb2, cb3, role, rop, rttl, rat, rmax, rstart)
  if st and not validReserved(res, rmax) then
    return false, serverNow, 'STATE_INCOMPATIBLE', false, 0, 0, 0, '', '', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
  end
  -- The reservations expired by now go: what they consumed stays.
  local live, expired, before = liveReservations(res, now)
  local n = #live / 16
  if rop == 1 then
    local _, _, allowed, e, l, c, ttl, remaining, retry, resetAt, remainingBefore, resetBefore = algStep(alg, st,
      lastObservedMs, epoch, level, carry, '', now, limit, ceiling, p2, p3, grace, cost, cal, cb0, cb1, cb2, cb3)
    if not allowed then
      return unwritten(st, now, 'DENIED', remaining, retry, resetAt, before)
    end
    local id, held, lastAmount = now + rttl, n, 1
    if n > 0 then
      local last
      last, lastAmount = unpack('>dd', live, (n - 1) * 16 + 1)
      if last + 1 > id then
        id = last + 1
      end
      if lastAmount == 0 then
        held = n - 1
      end
    end
    local shift = id - (now + rttl)
    if held >= MAX_RESERVATIONS or shift > MAX_RESERVATIONS or not sameWindow(alg, now, now + shift, p2, cal, cb1, cb2,
        cb3) then
      if held >= MAX_RESERVATIONS then
        shift = unpack('>d', live) - now
      end
      if shift < 1 then
        shift = 1
      end
      return unwritten(st, now, 'DENIED', remainingBefore, shift, resetBefore, before)
    end
    if role >= 3 then
      return unwritten(st, now, 'ALLOWED', remainingBefore, 0, resetBefore, before)
    end
    if held < n then
      -- The settled identity kept last goes: id is after it.
      live = sub(live, 1, #live - 16)
    end
    if id + grace - now > ttl then
      ttl = id + grace - now
    end
    return st, now, 'ALLOWED', true, e, l, c, '', live .. pack('>dd', id, cost), ttl, remaining, 0, resetAt,
      remainingBefore, resetBefore, id, before + cost, before, expired
  end
  -- A settle. idle: what a request of cost 0 meets on the state.
  local _, _, allowed, _, _, _, _, remaining, retry, resetAt, remainingBefore, resetBefore = algStep(alg, st,
    lastObservedMs, epoch, level, carry, '', now, limit, ceiling, p2, p3, grace, 0, cal, cb0, cb1, cb2, cb3)
  local status = 'DENIED'
  if allowed then
    status, remaining, retry, resetAt = 'ALLOWED', remainingBefore, 0, resetBefore
  end
  local found, amount, pos = false, 0, 1
  if rat ~= 0 then
    for i = 1, n do
      local id, a = unpack('>dd', live, pos)
      if id == rat and a > 0 then
        found, amount = i, a
        break
      elseif id >= rat then
        break
      end
      pos = pos + 16
    end
  end
  if not found and (rat ~= 0 or cost == 0) then
    return unwritten(st, now, status, remaining, retry, resetAt, before)
  end
  local rest, excess = live, cost
  if found then
    excess = cost - amount
    if found == n then
      rest = sub(live, 1, pos + 7) .. pack('>d', 0)
    else
      rest = sub(live, 1, pos - 1) .. sub(live, pos + 16)
    end
  end
  local lastId = 0
  if #rest > 0 then
    lastId = unpack('>d', rest, #rest - 15)
  end
  local write, e, l, c, ttl = 2, epoch, level, carry, KEEP_EXPIRY
  if excess > 0 then
    -- Charged as a charge (limiter.ChargeAlways) records it: to the ceiling.
    local fits, uRemaining, uResetAt
    _, _, fits, e, l, c, ttl, remaining, retry, resetAt, uRemaining, uResetAt = algStep(alg, st, lastObservedMs,
      epoch, level, carry, '', now, limit, ceiling, p2, p3, grace, excess, cal, cb0, cb1, cb2, cb3)
    if fits then
      status = 'ALLOWED'
      if role >= 3 then
        return unwritten(st, now, status, uRemaining, 0, uResetAt, before)
      end
    else
      local denied, deniedRetry, deniedReset = remaining, retry, resetAt
      status = 'DENIED'
      if role >= 3 then
        return unwritten(st, now, status, denied, deniedRetry, deniedReset, before)
      end
      local rec
      rec, e, l, c, _, ttl, remaining, retry, resetAt = chargeKey(alg, st, lastObservedMs, epoch, level, carry, '', now,
        limit, ceiling, p2, p3, grace, excess, cal, cb0, cb1, cb2, cb3)
      if not rec then
        if not found then
          return unwritten(st, now, status, remaining, retry, resetAt, before)
        end
        -- The state is at its ceiling: nothing more to record, but the
        -- reservation goes.
        e, l, c, ttl = epoch, level, carry, KEEP_EXPIRY
      end
    end
  else
    if role >= 3 then
      return unwritten(st, now, status, remaining, retry, resetAt, before)
    end
    if excess < 0 then
      e, l, c = settleRefund(alg, lastObservedMs, epoch, level, carry, now, limit, ceiling, p2, p3, -excess, rat - rttl,
        cal, rstart)
    end
    -- The reply: what a request of cost 0 meets after the settle.
    local kept
    _, _, allowed, _, _, _, kept, remaining, retry, resetAt, remainingBefore, resetBefore = algStep(alg, true, now, e,
      l, c, '', now, limit, ceiling, p2, p3, grace, 0, cal, cb0, cb1, cb2, cb3)
    if allowed then
      status, remaining, retry, resetAt = 'ALLOWED', remainingBefore, 0, resetBefore
    else
      status = 'DENIED'
    end
    if fresh then
      -- No expiry to keep (the reservation was taken by this request):
      -- the state's own, from a request of cost 0.
      ttl = kept
    end
  end
  if fresh and ttl == KEEP_EXPIRY then
    ttl = 0
  end
  if ttl ~= KEEP_EXPIRY and lastId ~= 0 and lastId + grace - now > ttl then
    ttl = lastId + grace - now
  end
  return st, now, status, write, e, l, c, '', rest, ttl, remaining, retry, resetAt, remaining, resetAt, 0,
    before - amount, before, expired
end
-- End of reserve.lua.
