-- fragments/calendar.lua: the calendar extension of a fixed window's key
-- (docs/algorithms.md, "Calendar windows"), in two sections included by
-- rate-batch-v1.lua:
--   valid   when the flags have the calendar bit (32). In: packed (the
--           key's packed argument), pos (where the extension starts: after
--           the fixed numbers and any earlier extension), alg, valid.
--           Out: valid, and cal (true) with cb0 < cb1 < cb2 < cb3, the
--           boundaries of three consecutive periods [cb0, cb1), [cb1,
--           cb2), [cb2, cb3) (Unix ms, integers in [0, 2^53-1]); the
--           extension must end the argument.
--   clock   after the clock rule (clock.lua). In: now, cal, cb0, cb3.
--           Out: now, nil (CLOCK_UNSAFE) when a calendar key's effective
--           now is in none of the three periods: the program never counts
--           into a period it was not told the boundaries of.
-- #section valid
valid = valid and alg == 'fixed_window' and #packed == pos + 31
if valid then
  cb0, cb1, cb2, cb3 = unpack('>dddd', packed, pos)
  valid = cb0 >= 0 and cb0 < cb1 and cb1 < cb2 and cb2 < cb3 and cb3 <= MAX
    and cb0 % 1 == 0 and cb1 % 1 == 0 and cb2 % 1 == 0 and cb3 % 1 == 0
  cal = valid
end
-- #section clock
if now and cal and (now < cb0 or now >= cb3) then
  now = nil
end
