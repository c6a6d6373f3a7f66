-- fragments/valid.lua: the rules of a key's arguments (limiter.NewPolicy,
-- Request.Validate), once. In: flags, policy, rev, limit, p2, p3, grace,
-- maxRegression, cost (the unpacked numbers: doubles, any value) and alg
-- (false for an unknown algorithm byte; fixed and sliding window: p2 the
-- window ms and p3 0; token bucket: the refill amount and period ms,
-- reduced). Out: valid, true when each is an integer in its range (NaN
-- fails every comparison; flags is a byte).
valid = flags <= 7 and #policy <= 128 and find(policy, POLICY_ID)
  and rev >= 1 and rev <= 4294967295 and rev % 1 == 0
  and limit >= 0 and limit <= MAX and limit % 1 == 0
  and p2 % 1 == 0 and p3 % 1 == 0
  and grace >= 0 and grace <= MAX_DURATION and grace % 1 == 0
  and maxRegression >= 0 and maxRegression <= MAX_DURATION and maxRegression % 1 == 0
  and cost >= 1 and cost <= MAX and cost % 1 == 0 and cost <= limit
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
