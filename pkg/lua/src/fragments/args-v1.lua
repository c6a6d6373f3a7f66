-- fragments/args-v1.lua: the arguments of one key of rate-batch-v1.lua:
-- two ARGV fields, the policy ID and the packed numbers (see the program's
-- header).
-- uses: unpack, band, find, POLICY_ID, ROLE_BITS, FAIL_OPEN, PENALTY, CALENDAR, MAX,
-- uses: MAX_DURATION, MAX_SLIDING, MAX_LOG, fmod, penaltyArgs, calendarArgs
-- defines: NARG, keyArgs

local NARG = 2

-- keyArgs reads and checks the arguments of the group's key gi. It
-- returns valid; the algorithm's name, the policy ID, the key's role and
-- failOpen (0 and false when not valid); the revision, limit, the two
-- algorithm arguments, grace, max clock regression and cost; the penalty
-- box (penalty, its duration, max duration and decay); a calendar window
-- (cal and the boundaries of its three periods).
local function keyArgs(gi)
  local base = (gi - 1) * NARG
  local policy, packed = ARGV[base + 1], ARGV[base + 2]
  local algorithm, flags, rev, limit, p2, p3, grace, maxRegression, cost, pos = unpack('>BBddddddd', packed)
  local valid, penalty, duration, maxDuration, decay = true, false, 0, 0, 0
  if band(flags, PENALTY) ~= 0 then
    valid, penalty, duration, maxDuration, decay, pos, flags = penaltyArgs(packed, pos, flags, limit)
  end
  valid = valid and #policy <= 128 and find(policy, POLICY_ID)
  -- #include valid.lua
  local alg
  -- #include algorithms.lua dispatch
  local cal, cb0, cb1, cb2, cb3 = false, 0, 0, 0, 0
  if valid and band(flags, CALENDAR) ~= 0 then
    valid, cb0, cb1, cb2, cb3 = calendarArgs(packed, pos, alg)
    cal = valid
  end
  local role, failOpen = 0, false
  if valid then
    role, failOpen = band(flags, ROLE_BITS), band(flags, FAIL_OPEN) ~= 0
  end
  return valid, alg, policy, role, failOpen, rev, limit, p2, p3, grace, maxRegression, cost,
    penalty, duration, maxDuration, decay, cal, cb0, cb1, cb2, cb3
end
