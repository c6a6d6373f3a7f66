-- fragments/clock.lua: the common clock rule, an inline block of a key's
-- evaluation: the effective now for a state (st: nil none, true one) last
-- observed at lastObservedMs, when Redis's clock reads serverNow:
-- serverNow, or lastObservedMs when the clock is behind it by at most
-- maxRegression; nil when it is behind by more (CLOCK_UNSAFE).
-- uses: serverNow
-- in: st, lastObservedMs, maxRegression
-- out: now
now = serverNow
if st and serverNow < lastObservedMs then
  now = lastObservedMs
  if lastObservedMs - serverNow > maxRegression then
    now = nil
  end
end
