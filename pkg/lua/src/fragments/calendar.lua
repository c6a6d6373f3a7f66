-- fragments/calendar.lua: the calendar extension of a fixed window's key
-- (docs/algorithms.md, "Calendar windows").
-- uses: unpack, MAX
-- defines: calendarArgs

-- calendarArgs reads the extension of packed, a fixed window's packed
-- argument, from pos (after the fixed numbers and any earlier extension;
-- it must end the argument): valid, and the boundaries cb0 < cb1 < cb2 <
-- cb3 of three consecutive periods [cb0, cb1), [cb1, cb2), [cb2, cb3)
-- (Unix ms, integers in [0, 2^53-1]). A key's effective now in none of
-- them is CLOCK_UNSAFE: the program never counts into a period it was not
-- told the boundaries of.
local function calendarArgs(packed, pos, alg)
  if alg ~= 'fixed_window' or #packed ~= pos + 31 then
    return false, 0, 0, 0, 0
  end
  local cb0, cb1, cb2, cb3 = unpack('>dddd', packed, pos)
  local valid = cb0 >= 0 and cb0 < cb1 and cb1 < cb2 and cb2 < cb3 and cb3 <= MAX
    and cb0 % 1 == 0 and cb1 % 1 == 0 and cb2 % 1 == 0 and cb3 % 1 == 0
  return valid, cb0, cb1, cb2, cb3
end
-- End of calendar.lua.
