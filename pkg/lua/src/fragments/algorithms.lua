-- fragments/algorithms.lua: the dispatch on the algorithm, in five
-- sections: dispatch (an inline block of a program's keyArgs: the byte
-- to the name and argument rules), byte (an inline block: the name to the
-- byte), run (functions: the algorithm's step, and a charge), step (an
-- inline block of a key's evaluation: the algorithm's step) and refund (a
-- function of the refund programs).
-- #section dispatch
-- uses: MAX, MAX_DURATION, MAX_LOG, MAX_SLIDING, fmod
-- in: algorithm, valid, ceiling, p2, p3
-- out: alg, valid
-- The algorithm byte (limiter.Algorithm) to its name, and its argument
-- rules; an unknown byte is not valid.
if algorithm == 1 then
  alg = 'fixed_window'
  -- #include fixed-window.lua valid
elseif algorithm == 2 then
  alg = 'sliding_window'
  -- #include sliding-window.lua valid
elseif algorithm == 3 then
  alg = 'token_bucket'
  -- #include token-bucket.lua valid
elseif algorithm == 4 then
  alg = 'gcra'
  -- #include gcra.lua valid
elseif algorithm == 5 then
  alg = 'sliding_log'
  -- #include sliding-log.lua valid
else
  alg, valid = false, false
end
-- #section byte
-- in: alg
-- out: algorithm
-- The algorithm's name to its byte (limiter.Algorithm).
if alg == 'fixed_window' then
  algorithm = 1
elseif alg == 'sliding_window' then
  algorithm = 2
elseif alg == 'token_bucket' then
  algorithm = 3
elseif alg == 'gcra' then
  algorithm = 4
else
  algorithm = 5
end
-- #section run
-- uses: fixedWindowStep, slidingWindowStep, tokenBucketStep, gcraStep,
-- uses: slidingLogStep, tokenBucketCharge
-- defines: algStep, chargeKey

-- algStep is alg's step on a compatible state (st true; nil none) at now:
-- incompatible, a sliding log that cannot be ours (then nothing else);
-- the log to write, allowed, the state to write (epoch, level, carry) and
-- its ttl, the reply (remaining, retry, resetAt) and the reply before the
-- cost (remainingBefore, resetBefore).
local function algStep(alg, st, lastObservedMs, epoch, level, carry, log, now, limit, ceiling, p2, p3, grace, cost,
                       cal, cb0, cb1, cb2, cb3)
  if alg == 'fixed_window' then
    return false, '', fixedWindowStep(st, epoch, level, now, limit, p2, grace, cost, cal, cb0, cb1, cb2, cb3)
  elseif alg == 'sliding_window' then
    return false, '', slidingWindowStep(st, epoch, level, carry, now, limit, p2, grace, cost)
  elseif alg == 'token_bucket' then
    return false, '', tokenBucketStep(st, epoch, level, carry, now, limit, p2, p3, grace, cost, ceiling)
  elseif alg == 'gcra' then
    return false, '', gcraStep(st, epoch, carry, now, limit, p2, p3, grace, cost, ceiling)
  end
  return slidingLogStep(st, lastObservedMs, epoch, level, carry, log, now, limit, p2, grace, cost)
end

-- chargeKey is limiter's charge of a key that charges always and whose
-- step denied cost: the cost recorded anyway, up to the ceiling (a token
-- bucket: tokenBucketCharge; the others: their step with the ceiling as
-- the limit, of the cost or of the room left under the ceiling). It
-- returns whether anything is recorded, the state to write (epoch, level,
-- carry, log) and its ttl, and the reply of one more unit (remaining,
-- retry, resetAt).
local function chargeKey(alg, st, lastObservedMs, epoch, level, carry, log, now, limit, ceiling, p2, p3, grace, cost,
                         cal, cb0, cb1, cb2, cb3)
  local rec, e, l, c, lg, ttl = true, 0, 0, 0, '', 0
  if alg == 'token_bucket' then
    e, l, c, ttl = tokenBucketCharge(st, epoch, level, carry, now, limit, p2, p3, grace, cost, ceiling)
  else
    local _, fits, room
    _, lg, fits, e, l, c, ttl, room = algStep(alg, st, lastObservedMs, epoch, level, carry, log, now, ceiling,
      ceiling, p2, p3, grace, cost, cal, cb0, cb1, cb2, cb3)
    if not fits then
      if room <= 0 then
        rec = false
      else
        _, lg, fits, e, l, c, ttl = algStep(alg, st, lastObservedMs, epoch, level, carry, log, now, ceiling,
          ceiling, p2, p3, grace, room, cal, cb0, cb1, cb2, cb3)
      end
    end
  end
  if rec then
    st, lastObservedMs, epoch, level, carry, log = true, now, e, l, c, lg
  end
  local _, _, fits, _, _, _, _, remaining, retry, resetAt, _, resetBefore = algStep(alg, st, lastObservedMs, epoch,
    level, carry, log, now, limit, ceiling, p2, p3, grace, 1, cal, cb0, cb1, cb2, cb3)
  if fits then
    resetAt = resetBefore
  end
  if remaining < 0 then
    remaining = 0
  end
  if retry < 1 then
    retry = 1
  end
  return rec, e, l, c, lg, ttl, remaining, retry, resetAt
end
-- #section step
-- uses: algStep, fixedWindowStep
-- in: alg, st, lastObservedMs, epoch, level, carry, log, now, limit, p2, p3,
-- in: grace, cost, cal, cb0, cb1, cb2, cb3, ceiling
-- out: incompatible, nLog, allowed, nEpoch, nLevel, nCarry, ttl, remaining,
-- out: retry, resetAt, remainingBefore, resetBefore
-- alg's step (algStep) on a compatible state (st true; nil none) at now;
-- a fixed window's, the common one, without algStep's call.
if alg == 'fixed_window' then
  incompatible, nLog = false, ''
  allowed, nEpoch, nLevel, nCarry, ttl, remaining, retry, resetAt, remainingBefore, resetBefore = fixedWindowStep(st,
    epoch, level, now, limit, p2, grace, cost, cal, cb0, cb1, cb2, cb3)
else
  incompatible, nLog, allowed, nEpoch, nLevel, nCarry, ttl, remaining, retry, resetAt, remainingBefore, resetBefore =
    algStep(alg, st, lastObservedMs, epoch, level, carry, log, now, limit, ceiling, p2, p3, grace, cost, cal, cb0,
      cb1, cb2, cb3)
end
-- #section refund
-- uses: fixedWindowRefund, slidingWindowRefund, tokenBucketRefund, gcraRefund,
-- uses: slidingLogRefund
-- defines: refundOf

-- refundOf gives back cost taken at effective time at from a compatible
-- state of alg (lastObservedMs, epoch, level, carry, log), by the
-- algorithm's refund, with the key's limit and its two algorithm
-- arguments (a calendar fixed window: the end and the length of the period
-- holding at). It returns whether it gave back, and the state to write.
local function refundOf(alg, lastObservedMs, epoch, level, carry, log, limit, p2, p3, cost, at)
  if alg == 'fixed_window' then
    local done, e, l, c = fixedWindowRefund(epoch, level, carry, p2, p3, cost, at)
    return done, e, l, c, log
  elseif alg == 'sliding_window' then
    local done, e, l, c = slidingWindowRefund(epoch, level, carry, p2, cost, at)
    return done, e, l, c, log
  elseif alg == 'token_bucket' then
    local done, e, l, c = tokenBucketRefund(epoch, level, carry, limit, p3, cost, at)
    return done, e, l, c, log
  elseif alg == 'gcra' then
    local done, e, l, c = gcraRefund(lastObservedMs, epoch, level, carry, p2, p3, cost, at)
    return done, e, l, c, log
  elseif alg == 'sliding_log' then
    return slidingLogRefund(epoch, level, carry, log, p2, cost, at)
  end
  return false, epoch, level, carry, log
end
