-- fragments/args-v2.lua: the argument of one key of rate-batch-v2.lua and
-- rate-refund-v2.lua: one ARGV field, the packed numbers (see the
-- programs' headers).
-- uses: unpack, unpackList, FAIL_OPEN, PENALTY, CALENDAR, MAX,
-- uses: MAX_DURATION, MAX_SLIDING, MAX_LOG, fmod, penaltyArgs, calendarArgs,
-- uses: CHARGE, RESERVE, reserveArgs
-- defines: NARG, argsRead, keyArgs

local NARG = 1
-- argsRead: false, or, for a run of several keys, what keyArgs returned
-- for each packed argument it read, by the argument: the keys of one
-- policy, cost and role share one (a string, which Lua keeps once), read
-- and checked once per run.
local argsRead = false

-- keyArgs reads and checks the argument of the group's key gi. It returns
-- valid; the algorithm's name, the key's role and failOpen (0 and false
-- when not valid); the limit, the two algorithm arguments, grace, max
-- clock regression and cost (the revision is checked, not returned: the
-- key names it); the penalty box (penalty, its duration, max
-- duration and decay); a calendar window (cal and the boundaries of its
-- three periods); whether the key charges always and its ceiling; its
-- reservation (rop, rttl, rat, rmax, rstart: args.lua).
local function keyArgs(gi)
  local packed, valid = ARGV[gi], true
  if argsRead then
    local r = argsRead[packed]
    if r then
      return unpackList(r, 1, 26)
    end
  end
  local alg, role, failOpen, rev, limit, p2, p3, grace, maxRegression, cost
  local penalty, duration, maxDuration, decay, cal, cb0, cb1, cb2, cb3, charge, ceiling
  local rop, rttl, rat, rmax, rstart
  -- #include args.lua
  if argsRead then
    argsRead[packed] = { valid, alg, role, failOpen, limit, p2, p3, grace, maxRegression, cost,
      penalty, duration, maxDuration, decay, cal, cb0, cb1, cb2, cb3, charge, ceiling, rop, rttl, rat, rmax, rstart }
  end
  return valid, alg, role, failOpen, limit, p2, p3, grace, maxRegression, cost,
    penalty, duration, maxDuration, decay, cal, cb0, cb1, cb2, cb3, charge, ceiling, rop, rttl, rat, rmax, rstart
end
