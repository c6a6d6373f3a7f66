-- fragments/time.lua: the store's clock, read exactly once per program, at
-- its top level (no function: it runs once).
-- uses: MAX
-- defines: serverNow
-- serverNow: ms; TIME's microseconds floored, without a C call: they are
-- below 1e6, where the VM's % is exact.
local serverNow
do
  local t = redis.call('TIME')
  local us = t[2] + 0
  serverNow = t[1] * 1000 + (us - us % 1000) / 1000
end
if not (serverNow >= 0 and serverNow <= MAX and serverNow % 1 == 0) then
  error('envoy-rls: inexact value')
end
-- End of time.lua.
