-- fragments/penalty.lua: a limit's penalty box (limiter.Penalty,
-- docs/algorithms.md "Penalty box"). Its state
-- (limiter.State): penaltyUntilMs, when the last block ends (effective
-- ms; 0 none), and penaltyLevel, the offence level (0 none).
-- Sections: args (penaltyArgs); blocked (what a blocked key replies); step
-- (penaltyStep).
-- #section args
-- uses: band, unpack, PENALTY, CALENDAR, MAX_PENALTY
-- defines: penaltyArgs

-- penaltyArgs reads the penalty extension of a key's packed argument,
-- when the flags' penalty bit (16) is set: struct.pack('>ddd') after the
-- fixed numbers (which end at pos): duration ms, max duration ms, decay
-- ms. It returns valid, penalty (the key has one), the three durations,
-- pos after the extension (where the calendar extension starts) and the
-- flags without the penalty bit.
local function penaltyArgs(packed, pos, flags, limit)
  if band(flags, PENALTY) == 0 then
    return true, false, 0, 0, 0, pos, flags
  end
  -- The extension ends the argument, unless the calendar extension
  -- follows it (calendarArgs checks that one's length from pos).
  if #packed < pos + 23 or #packed ~= pos + 23 and band(flags, CALENDAR) == 0 then
    return false, true, 0, 0, 0, pos, flags - PENALTY
  end
  local duration, maxDuration, decay
  duration, maxDuration, decay, pos = unpack('>ddd', packed, pos)
  local valid = limit >= 1
    and duration >= 1 and duration <= MAX_PENALTY and duration % 1 == 0
    and maxDuration >= duration and maxDuration <= MAX_PENALTY and maxDuration % 1 == 0
    and decay >= 0 and decay <= MAX_PENALTY and decay % 1 == 0
  return valid, true, duration, maxDuration, decay, pos, flags - PENALTY
end

-- #section blocked
-- defines: blockedRetry, blockedRemaining

-- blockedRetry is a blocked key's retry: until its block ends or, when the
-- limit itself denies the cost (not allowed, its own retry), until the
-- limit admits it, whichever is later. A client that came back at the
-- block's end while the limit still denies would earn a new offence.
local function blockedRetry(untilMs, now, allowed, retry)
  if not allowed and retry > untilMs - now then
    return retry
  end
  return untilMs - now
end

-- blockedRemaining is what a blocked key replies in its remaining field
-- (its remaining is 0): the ms until its block ends.
local function blockedRemaining(untilMs, now)
  return untilMs - now
end

-- #section step
-- uses: MAX, blockedRetry
-- defines: penaltyStep

-- penaltyStep runs after the algorithm's step, for a compatible state, on
-- its result (allowed, retry, resetAt, resetBefore, ttl) and the state's
-- penaltyUntilMs and penaltyLevel. A blocked subject is BLOCKED (remaining
-- 0, retry blockedRetry, reset at the later of the retry and the
-- algorithm's reset) and writes nothing. A denial of a key that
-- records offences (role < 3: an ordinary, shadow or quota key, never a
-- check or probe key) of a state that existed before this request (not
-- fresh) is an offence: a new block, its level, and offencePx, the expiry
-- (ms from serverNow) that covers the block and its decay; the reply
-- waits for the block. An allowed key's ttl covers a remembered penalty.
-- It returns blocked, allowed, retry, resetAt, ttl, penaltyUntilMs,
-- penaltyLevel and offencePx (false without an offence).
local function penaltyStep(penaltyUntilMs, penaltyLevel, duration, maxDuration, decay, fresh, role, now, serverNow,
                           grace, allowed, retry, resetAt, resetBefore, ttl)
  if penaltyUntilMs > now then
    if allowed then
      resetAt = resetBefore
    end
    retry = blockedRetry(penaltyUntilMs, now, allowed, retry)
    if resetAt < now + retry then
      resetAt = now + retry
    end
    return true, false, retry, resetAt, ttl, penaltyUntilMs, penaltyLevel, false
  elseif allowed then
    if penaltyLevel > 0 and ttl < penaltyUntilMs + decay + grace - now then
      ttl = penaltyUntilMs + decay + grace - now
    end
    return false, true, retry, resetAt, ttl, penaltyUntilMs, penaltyLevel, false
  elseif role >= 3 or fresh then
    return false, false, retry, resetAt, ttl, penaltyUntilMs, penaltyLevel, false
  end
  local level, block = 1, duration
  if penaltyLevel > 0 and now < penaltyUntilMs + decay then
    level = penaltyLevel + 1
    if level > 63 then
      level = 63
    end
  end
  for _ = 2, level do
    if block >= maxDuration then
      break
    end
    block = block * 2
  end
  if block > maxDuration then
    block = maxDuration
  end
  local untilMs = now + block
  local px = untilMs + decay + grace - serverNow
  if not (untilMs <= MAX and px <= MAX) then
    error('envoy-rls: inexact value')
  end
  if retry < block then
    retry = block
  end
  if resetAt < untilMs then
    resetAt = untilMs
  end
  return false, false, retry, resetAt, ttl, untilMs, level, px
end
-- End of penalty.lua.
