-- fragments/valid.lua: the rules of a key's arguments that every algorithm
-- shares (limiter.NewPolicy, Request.Validate), once; each algorithm's own
-- rules are its fragment's valid section. In: flags, policy, rev, limit,
-- p2, p3, grace, maxRegression, cost (the unpacked numbers: doubles, any
-- value). Out: valid, true when each is an integer in its range (NaN fails
-- every comparison; flags is a byte: the role in bits 0-2, at most 5,
-- failOpen at 8 and the calendar bit 32; penalty.lua's valid section,
-- before this, took off the penalty bit 16: 208 is every other bit).
valid = valid and bit.band(flags, 208) == 0 and bit.band(flags, ROLE_BITS) <= 5 and #policy <= 128 and find(policy, POLICY_ID)
  and rev >= 1 and rev <= 4294967295 and rev % 1 == 0
  and limit >= 0 and limit <= MAX and limit % 1 == 0
  and p2 % 1 == 0 and p3 % 1 == 0
  and grace >= 0 and grace <= MAX_DURATION and grace % 1 == 0
  and maxRegression >= 0 and maxRegression <= MAX_DURATION and maxRegression % 1 == 0
  and cost >= 1 and cost <= MAX and cost % 1 == 0 and cost <= limit
-- End of valid.lua.
