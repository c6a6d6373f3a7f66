-- fragments/prelude.lua: shared by every program (a test checks each
-- program contains it verbatim): constants and library locals.
-- defines: MAX, MAX_DURATION, MAX_PENALTY, FAIL_OPEN, PENALTY,
-- defines: CALENDAR, CHARGE, RESERVE, S, MAX_SLIDING, MAX_LOG, find,
-- defines: fmod, format, band, unpackList, unpack, pack, sub, max, ceilDiv
--
-- A script's whole body runs on every EVALSHA, so each function a program
-- defines is a closure made on every call: the fragments are functions of
-- explicit arguments and results, defined once per run and called per key
-- (docs/performance.md measures what that costs).
local MAX = 9007199254740991 -- 2^53-1: every number stays an exact integer
local MAX_DURATION = 316224000000 -- ten years in ms, as limiter.NewPolicy
local MAX_PENALTY = 2592000000 -- 30 days in ms, limiter.MaxPenalty
-- The flags byte of a key's packed argument (pkg/lua Flag*): its bits 0-2
-- the role (flags % 8, lua.FlagRoleMask); fail open, a penalty extension
-- follows, a calendar extension follows (after the penalty extension when
-- both do), the policy charges always, a reservation extension follows
-- (before the calendar extension).
local FAIL_OPEN, PENALTY, CALENDAR, CHARGE, RESERVE = 8, 16, 32, 64, 128
local S = 1000000 -- sliding-window weight scale (limiter.SlidingScale)
-- The largest sliding limit: (2^53-1) / S, exact (MAX / S is far from an
-- integer, so the VM's floor cannot round up).
local MAX_SLIDING = (MAX - MAX % S) / S
-- The largest sliding-log limit, hence the most entries of a log
-- (limiter.MaxSlidingLogLimit).
local MAX_LOG = 1000

-- Library functions as locals: a global or field lookup per call is a
-- measurable share of a program's Redis CPU.
-- (unpackList is Lua's unpack of a list; unpack is struct.unpack.)
local find, fmod, format, band = string.find, math.fmod, string.format, bit.band
local unpackList = unpack
local unpack, pack, sub, max = struct.unpack, struct.pack, string.sub, math.max
-- Exact integer division of non-negative integers below 2^53, written out
-- where it is needed: (a - fmod(a, b)) / b. C fmod is exact, so a - r is an
-- exact multiple of b and the quotient an exact integer (math.floor(a / b)
-- can be off by one, and a % b is computed from it). A ceiling adds 1 when
-- the remainder is not 0, without an a + b - 1 intermediate.

-- ceilDiv is ceil(x / d) of non-negative integers below 2^53, exact.
local function ceilDiv(x, d)
  local r = fmod(x, d)
  if r ~= 0 then
    return (x - r) / d + 1
  end
  return x / d
end
-- Decimal strings become numbers by arithmetic coercion (s + 0), not
-- tonumber (a C call that runs strtod twice), and only once they are known
-- to be canonical decimal integers (a non-number would raise).
-- End of the prelude.
