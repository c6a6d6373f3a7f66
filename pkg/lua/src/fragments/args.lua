-- fragments/args.lua: a key's packed numbers (lua.AppendBatchPacked), read
-- and checked, as an inline block of a program's keyArgs: struct.pack(
-- '>BBddddddd') of algorithm, flags, revision, limit, the two algorithm
-- arguments, grace, max clock regression and cost, then the penalty
-- extension (flag 16) and the calendar extension (flag 32). It gives the
-- algorithm's name, the key's role and failOpen (0 and false when not
-- valid), the numbers, the penalty box (penalty, its duration, max
-- duration and decay) and a calendar window (cal and the boundaries of its
-- three periods), whether it charges always with its ceiling, and a
-- reservation (flag 128, its extension struct.pack('>ddddd') between the
-- penalty and the calendar extensions): rop (false none, 1 a reserve, 2 a
-- settle), its TTL ms, the settle's identity (0 none), the policy's max
-- cost and, for a calendar window's settle, the start of the period
-- holding the reservation's time (0 otherwise).
-- uses: unpack, FAIL_OPEN, PENALTY, CALENDAR, MAX,
-- uses: MAX_DURATION, MAX_SLIDING, MAX_LOG, fmod, penaltyArgs, calendarArgs,
-- uses: CHARGE, RESERVE, reserveArgs
-- in: packed, valid
-- out: valid, alg, role, failOpen, rev, limit, p2, p3, grace, maxRegression,
-- out: cost, penalty, duration, maxDuration, decay, cal, cb0, cb1, cb2, cb3,
-- out: charge, ceiling, rop, rttl, rat, rmax, rstart
-- defines: algorithm, flags, pos
local algorithm, flags, pos
algorithm, flags, rev, limit, p2, p3, grace, maxRegression, cost, pos = unpack('>BBddddddd', packed)
-- The flags are a byte (0..255): bit b of it is set when flags % (2 * b)
-- >= b, exact arithmetic of the VM (a C call of bit.band per bit costs
-- Redis CPU on every key).
-- A charge (flag CHARGE) records usage up to its ceiling, twice the limit;
-- so does a reserving key's settle (flag RESERVE: limiter.Policy.Ceiling).
charge, ceiling = flags % 128 >= CHARGE, limit
if charge or flags >= RESERVE then
  ceiling = limit * 2
end
penalty, duration, maxDuration, decay = false, 0, 0, 0
if flags % 32 >= PENALTY then
  local ok
  ok, penalty, duration, maxDuration, decay, pos, flags = penaltyArgs(packed, pos, flags, limit)
  valid = valid and ok
end
rop, rttl, rat, rmax, rstart = false, 0, 0, 0, 0
if flags >= RESERVE then
  -- (A call only for a reserving policy's key.)
  local rok
  rok, rop, rttl, rat, rmax, rstart, pos, flags = reserveArgs(packed, pos, flags, penalty, algorithm, ceiling)
  valid = valid and rok
end
-- #include valid.lua
-- #include algorithms.lua dispatch
cal, cb0, cb1, cb2, cb3 = false, 0, 0, 0, 0
if valid and flags % 64 >= CALENDAR then
  valid, cb0, cb1, cb2, cb3 = calendarArgs(packed, pos, alg)
  cal = valid
end
role, failOpen = 0, false
if valid then
  role, failOpen = flags % 8, flags % 16 >= FAIL_OPEN
end
