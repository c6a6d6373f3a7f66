-- fragments/args-v1.lua: the arguments of one key of rate-batch-v1.lua:
-- two ARGV fields, the policy ID and the packed numbers (see the program's
-- header).
-- uses: find, POLICY_ID, unpack, band, ROLE_BITS, FAIL_OPEN, PENALTY, CALENDAR,
-- uses: MAX, MAX_DURATION, MAX_SLIDING, MAX_LOG, fmod, penaltyArgs, calendarArgs,
-- uses: CHARGE
-- defines: NARG, keyArgs

local NARG = 2

-- keyArgs reads and checks the arguments of the group's key gi. It
-- returns valid; the algorithm's name, the policy ID, the key's role and
-- failOpen (0 and false when not valid); the revision, limit, the two
-- algorithm arguments, grace, max clock regression and cost; the penalty
-- box (penalty, its duration, max duration and decay); a calendar window
-- (cal and the boundaries of its three periods); charge (always false
-- here) and the ceiling (the limit).
local function keyArgs(gi)
  local base = (gi - 1) * NARG
  local policy, packed = ARGV[base + 1], ARGV[base + 2]
  local valid = #policy <= 128 and find(policy, POLICY_ID) and true
  local alg, role, failOpen, rev, limit, p2, p3, grace, maxRegression, cost
  local penalty, duration, maxDuration, decay, cal, cb0, cb1, cb2, cb3, charge, ceiling
  -- Version 1 knows no charge: a key with the flag is not valid.
  local unknownFlags = 208
  -- #include args.lua
  return valid, alg, policy, role, failOpen, rev, limit, p2, p3, grace, maxRegression, cost,
    penalty, duration, maxDuration, decay, cal, cb0, cb1, cb2, cb3, charge, ceiling
end
