-- fragments/exact.lua: every number a program computed is an exact integer
-- in its range, checked once before it is replied or written. A number
-- out of range is a program bug: it raises (the store reports the program
-- failed), never a wrong reply or a wrong state. Two sections: check, an
-- inline block of a key's evaluation, and exact, a function for the
-- refund program.
-- #section check
-- uses: MAX, serverNow
-- in: remaining, retry, resetAt, write, remainingBefore, resetBefore, nEpoch,
-- in: nLevel, nCarry, ttl, now, hold
-- out:
-- A key's reply (remaining, retry, resetAt, a reservation's identity
-- hold) and, when it writes, the reply before the cost and the state to
-- write (nEpoch, nLevel, nCarry) with its expiry, now + ttl on the
-- effective clock (the store raises a ttl below 1 to 1).
if not (remaining >= 0 and remaining <= MAX and remaining % 1 == 0
    and retry >= 0 and retry <= MAX and retry % 1 == 0
    and resetAt >= 0 and resetAt <= MAX and resetAt % 1 == 0)
  or hold and not (hold >= 0 and hold <= MAX and hold % 1 == 0)
  or write and not (remainingBefore >= 0 and remainingBefore <= MAX and remainingBefore % 1 == 0
    and resetBefore >= 0 and resetBefore <= MAX and resetBefore % 1 == 0
    and nEpoch >= 0 and nEpoch <= MAX and nEpoch % 1 == 0 and nLevel >= 0 and nLevel <= MAX and nLevel % 1 == 0
    and nCarry >= 0 and nCarry <= MAX and nCarry % 1 == 0 and ttl <= MAX and ttl % 1 == 0
    and ttl + now - serverNow <= MAX) then
  error('envoy-rls: inexact value')
end
-- #section exact
-- uses: MAX
-- defines: exact

-- exact: whether n is an integer in [0, 2^53-1].
local function exact(n)
  return n >= 0 and n <= MAX and n % 1 == 0
end
