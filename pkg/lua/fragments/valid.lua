-- fragments/valid.lua: each algorithm's parameter rules (limiter.NewPolicy),
-- once. In: alg, limit (an integer in [0, 2^53-1]), p2, p3 (integers; fixed
-- and sliding window: the window ms and 0; token bucket: the refill amount
-- and period ms, reduced). Out: valid, and-ed with the rules (false for an
-- unknown alg).
if alg == 'fixed_window' then
  valid = valid and p3 == 0 and p2 >= 1 and p2 <= MAX_DURATION
elseif alg == 'sliding_window' then
  valid = valid and p3 == 0 and limit <= MAX_SLIDING and p2 >= 1 and p2 <= MAX_SLIDING
elseif alg == 'token_bucket' then
  -- capacity * period + amount stays below 2^53.
  valid = valid and p2 >= 1 and p2 <= MAX and p3 >= 1 and p3 <= MAX_DURATION
    and limit <= (MAX - p2 - fmod(MAX - p2, p3)) / p3
else
  valid = false
end
-- End of valid.lua.
