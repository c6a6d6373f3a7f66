-- rate-refund-v2.lua: give back what a committed rate-batch-v2 took, when
-- the request it was part of did not commit elsewhere (a Redis Cluster batch
-- split over several slots; docs/consistency.md). Version 2.
--
-- KEYS[1..N]  the states the batch wrote (one slot)
-- ARGV        one field per key, key i at ARGV[i]: its packed numbers as
--             rate-batch-v2.lua takes them (lua.AppendBatchPacked; the cost
--             is what was taken; a calendar window's extension around the
--             effective time below)
-- ARGV[N+1]   per key struct.pack('>d'): the effectiveNowMillis of the
--             batch's reply for it
--
-- Per key, only when the key still holds a state of its algorithm
-- (otherwise it expired, and what was taken went with it), the algorithm's
-- refund gives the cost back when the state is still the one the batch
-- wrote to (fixed window: the same window, for a calendar window the same
-- period; sliding window: the same or the next; token bucket and gcra:
-- written at or after effectiveNow; sliding log: its entry of effectiveNow
-- still logged), never below zero and never above the capacity (gcra: the
-- TAT never before that write). One SET of the state (KEEPTTL: the expiry
-- is kept). It does not read TIME.
--
-- Reply: an array of N integers, 1 refunded, 0 nothing to refund.
-- A wrong number of arguments is an error reply.
-- Not on the hot path (it runs only after a split batch did not commit).

-- #include prelude.lua
-- #include penalty.lua args
-- #include reserve.lua args
-- #include calendar.lua
-- #include exact.lua exact
-- #include fixed-window.lua refund
-- #include sliding-window.lua refund
-- #include token-bucket.lua refund
-- #include gcra.lua refund
-- #include sliding-log.lua refund
-- #include algorithms.lua refund
-- #include args-v2.lua
-- #include string-v2.lua load encode

-- refundKey gives back what the batch took from the group's key i at
-- effective time at: 1 when it wrote, else 0.
local function refundKey(i, at)
  local valid, alg, _, _, limit, p2, p3, _, _, cost, penalty, _, _, _, cal, cb0, cb1, cb2, cb3 = keyArgs(i)
  if not (valid and at >= 0 and at <= MAX and at % 1 == 0) then
    return 0
  end
  if cal then
    -- The period holding at: its end and its length.
    if at >= cb0 and at < cb1 then
      p2, p3 = cb1, cb1 - cb0
    elseif at >= cb1 and at < cb2 then
      p2, p3 = cb2, cb2 - cb1
    elseif at >= cb2 and at < cb3 then
      p2, p3 = cb3, cb3 - cb2
    else
      return 0
    end
  end
  local key = KEYS[i]
  local v = stateValue(key, i)
  if not v then
    return 0
  end
  local st, lastObservedMs, epoch, level, carry, log, penaltyUntilMs, penaltyLevel, reserved = decodeState(v, alg,
    penalty, true)
  if not st then
    -- Expired or foreign: what was taken went with it.
    return 0
  end
  local done
  done, epoch, level, carry, log = refundOf(alg, lastObservedMs, epoch, level, carry, log, limit, p2, p3, cost, at)
  if not done then
    return 0
  end
  if not (exact(epoch) and exact(level) and exact(carry)) then
    -- A program bug: it raises (the store reports the program failed).
    error('envoy-rls: inexact value')
  end
  redis.call('SET', key, encodeState(alg, lastObservedMs, epoch, level, carry, penaltyUntilMs, penaltyLevel, log,
    reserved), 'KEEPTTL')
  return 1
end

local n = #KEYS
if n < 1 or #ARGV ~= n * NARG + 1 or #ARGV[n + 1] ~= 8 * n then
  return redis.error_reply('envoy-rls: rate-refund-v2 takes 1 argument per key and the effective times')
end
stored, storedOne = prefetch(n)
local out, at, pos = {}, 0, 1
for i = 1, n do
  at, pos = unpack('>d', ARGV[n + 1], pos)
  out[i] = refundKey(i, at)
end
return out
