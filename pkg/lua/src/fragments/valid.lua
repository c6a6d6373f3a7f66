-- fragments/valid.lua: the rules of a key's arguments that every algorithm
-- shares (limiter.NewPolicy, Request.Validate), once, as an inline block of
-- a program's keyArgs (a call per key costs Redis CPU; docs/performance.md):
-- whether the unpacked numbers (doubles, any value) are each an integer in
-- its range (NaN fails every comparison). flags is a byte: the role in
-- bits 0-2, at most 5, failOpen at 8, the calendar bit 32 and the charge
-- bit 64; penaltyArgs took off the penalty bit 16 and args.lua the
-- reservation bit 128 (its bits tested by arithmetic, as args.lua does).
-- A charge may cost up to its ceiling (twice the limit,
-- limiter.Policy.Ceiling) and has no penalty box; only a settle (rop 2)
-- may cost 0. Each algorithm's own rules are its fragment's valid
-- section.
-- uses: PENALTY, MAX, MAX_DURATION
-- in: flags, rev, limit, p2, p3, grace, maxRegression, cost,
-- in: charge, ceiling, penalty, rop
-- out: valid
valid = valid and flags < 128 and flags % 32 < PENALTY and flags % 8 <= 5
  and not (charge and penalty) and ceiling <= MAX
  and rev >= 1 and rev <= 4294967295 and rev % 1 == 0
  and limit >= 0 and limit <= MAX and limit % 1 == 0
  and p2 % 1 == 0 and p3 % 1 == 0
  and grace >= 0 and grace <= MAX_DURATION and grace % 1 == 0
  and maxRegression >= 0 and maxRegression <= MAX_DURATION and maxRegression % 1 == 0
  and (cost >= 1 or cost == 0 and rop == 2) and cost <= MAX and cost % 1 == 0 and cost <= ceiling
