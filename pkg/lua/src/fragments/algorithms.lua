-- fragments/algorithms.lua: the dispatch on the algorithm, in four
-- sections: dispatch (an inline block of a program's keyArgs: the byte
-- to the name and argument rules), byte (an inline block: the name to the
-- byte), step (an inline block of a key's evaluation: the algorithm's
-- step) and refund (a function of the refund programs).
-- #section dispatch
-- uses: MAX, MAX_DURATION, MAX_LOG, MAX_SLIDING, fmod
-- in: algorithm, valid, limit, p2, p3
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
-- #section step
-- uses: fixedWindowStep, slidingWindowStep, tokenBucketStep, gcraStep,
-- uses: slidingLogStep
-- in: alg, st, lastObservedMs, epoch, level, carry, log, now, limit, p2, p3,
-- in: grace, cost, cal, cb0, cb1, cb2, cb3
-- out: incompatible, nLog, allowed, nEpoch, nLevel, nCarry, ttl, remaining,
-- out: retry, resetAt, remainingBefore, resetBefore
-- alg's step on a compatible state (st true; nil none) at now: allowed,
-- the state to write (nEpoch, nLevel, nCarry, nLog) and its ttl, the
-- reply (remaining, retry, resetAt) and the reply before the cost
-- (remainingBefore, resetBefore); incompatible, a sliding log that cannot
-- be ours (then nothing else).
incompatible, nLog = false, ''
if alg == 'fixed_window' then
  allowed, nEpoch, nLevel, nCarry, ttl, remaining, retry, resetAt, remainingBefore, resetBefore =
    fixedWindowStep(st, epoch, level, now, limit, p2, grace, cost, cal, cb0, cb1, cb2, cb3)
elseif alg == 'sliding_window' then
  allowed, nEpoch, nLevel, nCarry, ttl, remaining, retry, resetAt, remainingBefore, resetBefore =
    slidingWindowStep(st, epoch, level, carry, now, limit, p2, grace, cost)
elseif alg == 'token_bucket' then
  allowed, nEpoch, nLevel, nCarry, ttl, remaining, retry, resetAt, remainingBefore, resetBefore =
    tokenBucketStep(st, epoch, level, carry, now, limit, p2, p3, grace, cost)
elseif alg == 'gcra' then
  allowed, nEpoch, nLevel, nCarry, ttl, remaining, retry, resetAt, remainingBefore, resetBefore =
    gcraStep(st, epoch, carry, now, limit, p2, p3, grace, cost)
else
  incompatible, nLog, allowed, nEpoch, nLevel, nCarry, ttl, remaining, retry, resetAt, remainingBefore,
    resetBefore = slidingLogStep(st, lastObservedMs, epoch, level, carry, log, now, limit, p2, grace, cost)
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
