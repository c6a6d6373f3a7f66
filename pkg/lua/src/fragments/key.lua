-- fragments/key.lua: the evaluation of one key of a request, in inline
-- blocks shared by evalKey (evaluate.lua, a key of any request) and
-- evaluateOne (one.lua, the run of one request of one key), so that each
-- rule has one definition and neither pays a call per block. Sections:
-- state (the key's state from its value), check (the clock rule, the
-- algorithm's step, the penalty box and a charge, then the exactness
-- check), commits (the batch rule, limiter.Commits, per key) and commit
-- (its outcome).
-- #section state
-- uses: decodeState
-- in: v, alg, penalty, rop
-- out: st, lastObservedMs, epoch, level, carry, log, penaltyUntilMs,
-- out: penaltyLevel, reserved, fresh, storedEpoch
-- The state of a value as the run sees it (v: false none, '' a key of
-- another type), fresh when there is none, its window as stored.
st, lastObservedMs, epoch, level, carry, log, penaltyUntilMs, penaltyLevel, reserved = decodeState(v, alg, penalty, rop)
fresh, storedEpoch = st == nil, epoch
-- #section check
-- uses: serverNow, penaltyStep, blockedRemaining, chargeKey, MAX, algStep,
-- uses: fixedWindowStep, reservationStep
-- in: st, lastObservedMs, epoch, level, carry, log, penaltyUntilMs,
-- in: penaltyLevel, reserved, fresh, alg, role, limit, p2, p3, grace,
-- in: maxRegression, cost, penalty, duration, maxDuration, decay, cal, cb0,
-- in: cb1, cb2, cb3, charge, ceiling, rop, rttl, rat, rmax, rstart
-- out: st, penaltyUntilMs, penaltyLevel
-- defines: status, eff, remaining, retry, resetAt, now, write, incompatible,
-- defines: allowed, blocked, px, nLog, nEpoch, nLevel, nCarry, nReserved,
-- defines: hold, held, heldBefore, expired, ttl, remainingBefore,
-- defines: resetBefore
-- A valid key's status and reply (eff: its effective now), the state to
-- write (write: true, or 2 for a charge or a settle written whatever the
-- request commits), its offence (px: its expiry, false none), a reserving
-- key's reservations (hold...expired: reserve.lua; hold false others).
-- A key that is not evaluated (STATE_INCOMPATIBLE, CLOCK_UNSAFE) replies
-- (serverNow, 0, 0, 0).
local status, eff, remaining, retry, resetAt, ttl, remainingBefore, resetBefore = 'STATE_INCOMPATIBLE', serverNow, 0,
  0, 0, 0, 0, 0
local write, blocked, px, nReserved, hold, held, heldBefore, expired = false, false, false, reserved, rop and 0, 0, 0, 0
-- (Set by the clock rule and the step, read only after them or, the state
-- to write, when the key writes.)
local now, incompatible, allowed, nLog, nEpoch, nLevel, nCarry
if st ~= false then
  -- #include clock.lua
  if now and cal and (now < cb0 or now >= cb3) then
    now = nil
  end
  if not now then
    status = 'CLOCK_UNSAFE'
  elseif rop then
    st, eff, status, write, nEpoch, nLevel, nCarry, nLog, nReserved, ttl, remaining, retry, resetAt, remainingBefore,
      resetBefore, hold, held, heldBefore, expired = reservationStep(alg, st, fresh, lastObservedMs, epoch, level, carry, reserved, now, limit,
        ceiling, p2, p3, grace, cost, cal, cb0, cb1, cb2, cb3, role, rop, rttl, rat, rmax, rstart)
  else
    -- #include algorithms.lua step
    if incompatible then
      -- A stored log that cannot be ours.
      st, remaining, retry, resetAt, ttl, remainingBefore, resetBefore = false, 0, 0, 0, 0, 0, 0
    else
      eff = now
      if penalty and st then
        blocked, allowed, retry, resetAt, ttl, penaltyUntilMs, penaltyLevel, px = penaltyStep(penaltyUntilMs,
          penaltyLevel, duration, maxDuration, decay, fresh, role, now, serverNow, grace, allowed, retry,
          resetAt, resetBefore, ttl)
      end
      if blocked then
        status, remaining = 'BLOCKED', blockedRemaining(penaltyUntilMs, now)
      elseif not allowed then
        status = 'DENIED'
        if charge and role < 3 then
          -- A charge (limiter.Request.Charges): recorded anyway, up to
          -- the ceiling, and written whatever the request commits
          -- (write 2); the reply is what one more unit meets.
          write, nEpoch, nLevel, nCarry, nLog, ttl, remaining, retry, resetAt = chargeKey(alg, st, lastObservedMs,
            epoch, level, carry, log, now, limit, ceiling, p2, p3, grace, cost, cal, cb0, cb1, cb2, cb3)
          if write then
            write = 2
          end
        end
      elseif role >= 3 then
        -- A check or (quota) probe key: its reply before the cost, never
        -- written.
        status, remaining, resetAt = 'ALLOWED', remainingBefore, resetBefore
      elseif charge then
        status, write = 'ALLOWED', 2
      else
        status, write = 'ALLOWED', true
      end
    end
  end
end
-- #include exact.lua check
-- #section commits
-- in: role, failOpen, status, refused, quota, quotaAllows, rop
-- out: refused, quota, quotaAllows
-- limiter.Commits, key by key: shadow and check keys and settles (rop 2)
-- never block; a fail-open failure takes no part; quota keys (and quota
-- probes) commit when one of them is ALLOWED; any other key not ALLOWED
-- refuses the request.
if role == 1 or role == 3 or rop == 2 then
  -- (no part)
elseif failOpen and status ~= 'ALLOWED' and status ~= 'DENIED' and status ~= 'BLOCKED' then
  -- (no part)
elseif role == 2 or role == 5 then
  quota, quotaAllows = quota + 1, quotaAllows or status == 'ALLOWED'
elseif status ~= 'ALLOWED' then
  refused = true
end
-- #section commit
-- in: refused, quota, quotaAllows
-- out: commit
-- Whether the request commits, once every key passed commits.
commit = not refused and (quota == 0 or quotaAllows)
