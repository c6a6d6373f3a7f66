-- fragments/record.lua: the record of a request of several keys (rec),
-- as an inline block declaring its offsets, in each function that reads
-- or writes it (locals: a constant a function captures is an upvalue,
-- which costs every program run; docs/performance.md). R values per key i,
-- at (i - 1) * R + one of these offsets, all filled (no nil, so the table
-- stays one array):
--   R_KIND      what a later key naming the same state sees after key i:
--               0 nothing (key i was INVALID: look further back), 1 no
--               state, 2 incompatible, 3 the state R_LAST..R_LOG
--   R_LAST, R_EPOCH, R_LEVEL, R_CARRY, R_LOG   the tentative write, or the
--               state key i saw (limiter.State's LastObservedMs, Epoch,
--               Level, Carry, Log)
--   R_PENALTY_UNTIL, R_PENALTY_LEVEL   its penalty box, as key i left it
--   R_FRESH     no state before this request
--   R_STORED_EPOCH   the window of the state as stored (storeState)
--   R_WRITE     ALLOWED and not a check or probe key; to write it or, when
--               the batch does not commit, to reply before the cost:
--   R_TTL, R_REMAINING_BEFORE, R_RESET_BEFORE, R_ALG
--   R_RESERVED  the reservations, of the tentative write or as key i saw
--               them (limiter.State's Reserved)
-- #section offsets
-- defines: R_KIND, R_LAST, R_EPOCH, R_LEVEL, R_CARRY, R_LOG, R_PENALTY_UNTIL,
-- defines: R_PENALTY_LEVEL, R_FRESH, R_STORED_EPOCH, R_WRITE, R_TTL,
-- defines: R_REMAINING_BEFORE, R_RESET_BEFORE, R_ALG, R_RESERVED, R
-- in:
local R_KIND, R_LAST, R_EPOCH, R_LEVEL, R_CARRY, R_LOG = 1, 2, 3, 4, 5, 6
local R_PENALTY_UNTIL, R_PENALTY_LEVEL, R_FRESH, R_STORED_EPOCH = 7, 8, 9, 10
local R_WRITE, R_TTL, R_REMAINING_BEFORE, R_RESET_BEFORE, R_ALG, R_RESERVED = 11, 12, 13, 14, 15, 16
local R = 16
