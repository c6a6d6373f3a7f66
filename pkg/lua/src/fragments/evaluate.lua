-- fragments/evaluate.lua: the evaluation of one request of a group, all or
-- nothing, for the rate programs: each key checked in order, writing
-- nothing (the state a key would have after an allowed request is kept in
-- the request's record, so a later key naming the same state sees it),
-- then the batch rule (limiter.Commits), then the writes. A request of one
-- key, the common one, is evaluateOne's (one.lua): evaluate and evalKey
-- take requests of several keys. A key's evaluation is key.lua's inline
-- blocks, which evaluateOne includes too.
-- uses: serverNow, keyArgs, stateValue, decodeState, storeState, writeOffence,
-- uses: replyBefore, penaltyStep, blockedRemaining, MAX, algStep, chargeKey,
-- uses: fixedWindowStep, reservationStep
-- defines: WIDE, priorState, invalidRecord, recordKey, evalKey, commitKeys, evaluate
--
-- The program defines its layout's parts: keyArgs(gi), the arguments of
-- the group's key gi; stateValue(key, gi), the value of a key as the run
-- sees it, and decodeState(v, alg, penalty), its state; storeState(...),
-- its write; writeOffence(...), a penalty box's offence; replyBefore(...)
-- and the inline blocks reply-v2.lua new and key, the reply.

-- WIDE: above this many keys a request finds the keys naming the same
-- state through two tables (seen, lastWrite) instead of scanning: cheaper
-- for a few keys, quadratic for many (a request of 64 descriptors with 16
-- limits each has 1,024).
local WIDE = 32

-- priorState, for key i of a request of several keys (starting after
-- kb) naming key: whether a key before it names the same state with a
-- record that counts, and then that record: st (nil none, false
-- incompatible, true), the state, its penalty box, fresh and the window
-- as stored, its reservations.
local function priorState(kb, i, key, rec, seen)
  -- #include record.lua offsets
  local j = 0
  if seen then
    j = seen[key] or 0
  else
    for k = i - 1, 1, -1 do
      if KEYS[kb + k] == key and rec[(k - 1) * R + R_KIND] ~= 0 then
        j = k
        break
      end
    end
  end
  if j == 0 then
    return false
  end
  local p = (j - 1) * R
  local kind, st = rec[p + R_KIND], true
  if kind == 1 then
    st = nil
  elseif kind == 2 then
    st = false
  end
  return true, st, rec[p + R_LAST], rec[p + R_EPOCH], rec[p + R_LEVEL], rec[p + R_CARRY], rec[p + R_LOG],
    rec[p + R_PENALTY_UNTIL], rec[p + R_PENALTY_LEVEL], rec[p + R_FRESH], rec[p + R_STORED_EPOCH], rec[p + R_RESERVED]
end

-- invalidRecord writes the record of key i (a request of several keys),
-- INVALID: kind 0 (a later key naming its state looks further back) and
-- nothing to write.
local function invalidRecord(rec, i)
  -- #include record.lua offsets
  local o = (i - 1) * R
  rec[o + R_KIND], rec[o + R_WRITE] = 0, false
end

-- recordKey records key i of a request of several keys, once checked:
-- its offence (px: its expiry; false none) goes to offences, returned (five
-- values per offence: key, gi, penaltyUntilMs, penaltyLevel, px); its
-- record to rec: its kind, the state a later key naming it sees and what
-- its write needs; and, for a wide request, to seen and lastWrite. A
-- later key naming the same state sees the state to write (nEpoch..nLog,
-- nReserved, at now) when it writes, else the state it saw.
local function recordKey(rec, i, key, gi, seen, lastWrite, offences, px, st, write, now, nEpoch, nLevel, nCarry, nLog,
                         nReserved, lastObservedMs, epoch, level, carry, log, reserved, penaltyUntilMs, penaltyLevel,
                         fresh, storedEpoch, ttl, remainingBefore, resetBefore, alg)
  if px then
    if not offences then
      offences = {}
    end
    local m = #offences
    offences[m + 1], offences[m + 2], offences[m + 3], offences[m + 4], offences[m + 5] =
      key, gi, penaltyUntilMs, penaltyLevel, px
  end
  local kind = 3
  if write then
    lastObservedMs, epoch, level, carry, log, reserved = now, nEpoch, nLevel, nCarry, nLog, nReserved
  elseif st == nil then
    kind = 1
  elseif st == false then
    kind, lastObservedMs, epoch, level, carry, log, penaltyUntilMs, penaltyLevel = 2, 0, 0, 0, 0, '', 0, 0
    storedEpoch, reserved = 0, ''
  end
  -- #include record.lua offsets
  local o = (i - 1) * R
  rec[o + R_KIND], rec[o + R_WRITE] = kind, write
  rec[o + R_LAST], rec[o + R_EPOCH], rec[o + R_LEVEL], rec[o + R_CARRY], rec[o + R_LOG] =
    lastObservedMs, epoch, level, carry, log
  rec[o + R_PENALTY_UNTIL], rec[o + R_PENALTY_LEVEL], rec[o + R_FRESH] = penaltyUntilMs, penaltyLevel, fresh
  rec[o + R_STORED_EPOCH], rec[o + R_TTL], rec[o + R_REMAINING_BEFORE], rec[o + R_RESET_BEFORE] = storedEpoch, ttl,
    remainingBefore, resetBefore
  rec[o + R_ALG], rec[o + R_RESERVED] = alg, reserved
  if seen then
    seen[key] = i
    if write then
      lastWrite[key] = i
    end
  end
  return offences
end

-- evalKey evaluates key i of the request whose n keys (2 or more) start
-- after the group's first kb. It is recorded (rec, seen,
-- lastWrite, offences: false, or five values per offence: key, gi,
-- penaltyUntilMs, penaltyLevel, expiry ms) for the commit. It returns the
-- key's reply (status, effective now, remaining, retry, resetAt; the
-- parser has the limit),
-- its role and failOpen, offences, whether it settles (rop 2) and the
-- identity of its reservation (false: not a reserving policy's key) with
-- its live reservations' units after and before it and the expired ones
-- it drops (reserve.lua).
local function evalKey(kb, i, n, rec, seen, lastWrite, offences)
  local gi = kb + i
  local key = KEYS[gi]
  local valid, alg, role, failOpen, limit, p2, p3, grace, maxRegression, cost,
    penalty, duration, maxDuration, decay, cal, cb0, cb1, cb2, cb3, charge, ceiling, rop, rttl, rat, rmax, rstart =
    keyArgs(gi)
  if not valid then
    invalidRecord(rec, i)
    return 'INVALID', serverNow, 0, 0, 0, role, failOpen, offences, false, rop and 0, 0, 0, 0
  end
  -- The state: what the last earlier key naming it left, else the store's.
  local prior, st, lastObservedMs, epoch, level, carry, log, penaltyUntilMs, penaltyLevel, fresh, storedEpoch, reserved =
    priorState(kb, i, key, rec, seen)
  if not prior then
    local v = stateValue(key, gi)
    -- #include key.lua state
  end
  -- #include key.lua check
  offences = recordKey(rec, i, key, gi, seen, lastWrite, offences, px, st, write, now, nEpoch, nLevel, nCarry, nLog,
    nReserved, lastObservedMs, epoch, level, carry, log, reserved, penaltyUntilMs, penaltyLevel, fresh, storedEpoch,
    ttl, remainingBefore, resetBefore, alg)
  return status, eff, remaining, retry, resetAt, role, failOpen, offences, rop, hold, held, heldBefore, expired
end

-- commitKeys, once every key of a request of n keys (starting after kb)
-- has been evaluated: when it commits, each state to write is written
-- (the last write of a state named twice, with the penalty box the last
-- key naming it left); when it does not, an allowed key replies before its
-- cost, but a charge (write 2) is written all the same.
local function commitKeys(kb, n, rec, out, seen, lastWrite, commit)
  -- #include record.lua offsets
  for i = 1, n do
    local o = (i - 1) * R
    if rec[o + R_WRITE] == true and not commit then
      -- Not consumed: the reply before the cost (checked with the key).
      replyBefore(out, i, rec[o + R_REMAINING_BEFORE], rec[o + R_RESET_BEFORE])
    elseif rec[o + R_WRITE] then
      local key, last, final = KEYS[kb + i], true, i
      if lastWrite then
        last, final = lastWrite[key] == i, seen[key]
      else
        for k = i + 1, n do
          if KEYS[kb + k] == key then
            if rec[(k - 1) * R + R_WRITE] then
              last = false
              break
            elseif rec[(k - 1) * R + R_KIND] ~= 0 then
              final = k
            end
          end
        end
      end
      if last then
        local f = (final - 1) * R
        storeState(key, kb + i, rec[o + R_FRESH], rec[o + R_ALG], rec[o + R_LAST], rec[o + R_EPOCH],
          rec[o + R_LEVEL], rec[o + R_CARRY], rec[o + R_LOG], rec[o + R_TTL], rec[o + R_STORED_EPOCH],
          rec[f + R_PENALTY_UNTIL], rec[f + R_PENALTY_LEVEL], rec[o + R_RESERVED])
      end
    end
  end
end

-- evaluate is one request of several keys: its n keys start after the
-- group's first kb; rec is the group's record array, reused by each of
-- its requests (only the records of the request's own keys are read). It
-- returns the request's reply: three fields per reserving policy's key
-- follow those of every key: its reservation's identity (0 unless the
-- request commits), the units its live reservations hold and the expired
-- ones it dropped (those before it, and 0, for a reserve that does not
-- commit).
local function evaluate(kb, n, rec)
  local out
  -- #include reply-v2.lua new
  local seen, lastWrite = false, false
  if n > WIDE then
    seen, lastWrite = {}, {}
  end
  local offences, refused, quota, quotaAllows, holds, befores = false, false, 0, false, 0, false
  for i = 1, n do
    local status, eff, remaining, retry, resetAt, role, failOpen, rop, hold, held, heldBefore, expired
    status, eff, remaining, retry, resetAt, role, failOpen, offences, rop, hold, held, heldBefore, expired = evalKey(kb,
      i, n, rec, seen, lastWrite, offences)
    -- #include reply-v2.lua key
    -- #include key.lua commits
    if hold then
      local h = 2 + 4 * n + 3 * holds
      holds = holds + 1
      out[h + 1], out[h + 2], out[h + 3] = hold, held, expired
      if hold ~= 0 then
        befores = befores or {}
        befores[holds] = heldBefore
      end
    end
  end
  local commit
  -- #include key.lua commit
  if not commit then
    for k = 1, holds do
      local h = 2 + 4 * n + 3 * (k - 1)
      if out[h + 1] ~= 0 then
        out[h + 1], out[h + 2], out[h + 3] = 0, befores[k], 0
      end
    end
  end
  -- The offences found, now that no key of the request can raise any
  -- more: written whatever the request commits, in key order (a later
  -- offence against the same state builds on an earlier one).
  if offences then
    for m = 1, #offences, 5 do
      writeOffence(offences[m], offences[m + 1], offences[m + 2], offences[m + 3], offences[m + 4])
    end
  end
  commitKeys(kb, n, rec, out, seen, lastWrite, commit)
  if commit then
    out[1] = 1
  end
  return out
end
