-- fragments/one.lua: a request of one key, the common request (every
-- request of a run of one key, the run at low load), evaluated by one
-- function instead of evaluate's loop over evalKey (evaluate.lua): the
-- same inline blocks (key.lua, reply-v2.lua) without a call per key, a
-- record or the commit of several keys (a single key that writes is one
-- that commits, so it writes as soon as it is checked).
-- uses: serverNow, keyArgs, stored, storedOne, stateValue, decodeState,
-- uses: storeState, writeOffence, penaltyStep, blockedRemaining, MAX, algStep,
-- uses: chargeKey, fixedWindowStep, reservationStep
-- defines: oneReply, evaluateOne

-- oneReply is the reply of a request of one key whose status, effective
-- now, remaining, retry and reset-at are given, with its role and
-- failOpen, whether it settles (rop 2) and its reservation's identity
-- (hold; false: not a reserving policy's key, whose reply has no such
-- fields) with its live reservations' units after and before it and the
-- expired ones it drops: committed by the batch rule.
local function oneReply(status, eff, remaining, retry, resetAt, role, failOpen, rop, hold, held, heldBefore, expired)
  local out
  -- #include reply-v2.lua one
  local refused, quota, quotaAllows, commit = false, 0, false, false
  -- #include key.lua commits
  -- #include key.lua commit
  if commit then
    out[1] = 1
  end
  if hold then
    if not commit and hold ~= 0 then
      hold, held, expired = 0, heldBefore, 0
    end
    out[7], out[8], out[9] = hold, held, expired
  end
  return out
end

-- evaluateOne is the request of one key after the group's first kb,
-- evaluated as evaluate would a request of several, and returns its
-- reply. The key's value is stateValue's; in a run of one key (stored
-- false, and so nothing written by an earlier request) storedOne, read
-- without the call.
local function evaluateOne(kb)
  local gi = kb + 1
  local key = KEYS[gi]
  local valid, alg, role, failOpen, limit, p2, p3, grace, maxRegression, cost,
    penalty, duration, maxDuration, decay, cal, cb0, cb1, cb2, cb3, charge, ceiling, rop, rttl, rat, rmax, rstart =
    keyArgs(gi)
  if not valid then
    return oneReply('INVALID', serverNow, 0, 0, 0, role, failOpen, false, rop and 0, 0, 0, 0)
  end
  local v = storedOne
  if stored then
    v = stateValue(key, gi)
  end
  local st, lastObservedMs, epoch, level, carry, log, penaltyUntilMs, penaltyLevel, reserved, fresh, storedEpoch
  -- #include key.lua state
  -- #include key.lua check
  if px then
    writeOffence(key, gi, penaltyUntilMs, penaltyLevel, px)
  elseif write then
    storeState(key, gi, fresh, alg, now, nEpoch, nLevel, nCarry, nLog, ttl, storedEpoch, penaltyUntilMs, penaltyLevel,
      nReserved)
  end
  return oneReply(status, eff, remaining, retry, resetAt, role, failOpen, rop, hold, held, heldBefore, expired)
end
-- End of one.lua.
