-- fragments/exact.lua: every number the program computed is an exact
-- integer in its range, checked once, where the key's evaluation ends. In:
-- remaining, retry, resetAt (every key), and when write: remainingBefore, resetBefore
-- (the reply before the cost), a, b, c, ttl, now and serverNow (the state
-- to write and its expiry, now + ttl on the effective clock: store.lua
-- raises a ttl below 1 to 1). eff and serverNow are the clock's and lim a
-- checked argument. A number out of range is a program bug: it raises (the
-- store reports the program failed), never a wrong reply or a wrong hash.
if not (remaining >= 0 and remaining <= MAX and remaining % 1 == 0
    and retry >= 0 and retry <= MAX and retry % 1 == 0
    and resetAt >= 0 and resetAt <= MAX and resetAt % 1 == 0)
  or write and not (remainingBefore >= 0 and remainingBefore <= MAX and remainingBefore % 1 == 0
    and resetBefore >= 0 and resetBefore <= MAX and resetBefore % 1 == 0
    and a >= 0 and a <= MAX and a % 1 == 0 and b >= 0 and b <= MAX and b % 1 == 0
    and c >= 0 and c <= MAX and c % 1 == 0 and ttl <= MAX and ttl % 1 == 0
    and ttl + now - serverNow <= MAX) then
  error('envoy-rls: inexact value')
end
-- End of exact.lua.
