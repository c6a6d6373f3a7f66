-- fragments/clock.lua: the common clock rule. In: st, stLast, serverNow,
-- maxRegression. Out: now, the effective now, or nil when the store clock is
-- behind the state's last-observed time by more than maxRegression
-- (CLOCK_UNSAFE).
now = serverNow
if st and serverNow < stLast then
  now = stLast
  if stLast - serverNow > maxRegression then
    now = nil
  end
end
-- End of clock.lua.
