-- fragments/group.lua: the group of a rate program's run, its last ARGV
-- field: per request struct.pack('>Hd'), its number of keys and its
-- deadline in ms of Redis's clock (0: none).
-- uses: MAX, unpack, serverNow, evaluate
-- defines: groupOf, runGroup

-- groupOf reads the group field for nkeys keys, checked whole before
-- anything is evaluated: the requests' key counts and deadlines, or false
-- and what is wrong.
local function groupOf(group, nkeys)
  local nreq = #group / 10
  if nreq < 1 or nreq % 1 ~= 0 then
    return false, false, 'the group field is not 10 bytes per request'
  end
  local counts, deadlines = {}, {}
  local pos, total = 1, 0
  for q = 1, nreq do
    local kn, dl
    kn, dl, pos = unpack('>Hd', group, pos)
    total = total + kn
    if kn < 1 or total > nkeys or not (dl == 0 or dl >= 1 and dl <= MAX and dl % 1 == 0) then
      return false, false, 'request ' .. q .. ' of the group: key count or deadline out of range'
    end
    counts[q], deadlines[q] = kn, dl
  end
  if total ~= nkeys then
    return false, false, 'the group names ' .. total .. ' keys, KEYS has ' .. nkeys
  end
  return counts, deadlines
end

-- runGroup evaluates the requests in order, each under pcall: one that
-- raises (before it writes: checkExact runs before any write) fails alone.
-- A request whose deadline serverNow is past is not evaluated. It returns
-- the replies, one per request.
local function runGroup(counts, deadlines)
  local replies, kb, rec = {}, 0, {}
  for q = 1, #counts do
    if deadlines[q] ~= 0 and serverNow > deadlines[q] then
      replies[q] = { 2, serverNow }
    else
      local ok, r = pcall(evaluate, kb, counts[q], rec)
      if ok then
        replies[q] = r
      elseif type(r) == 'table' then
        -- A command's error reply (redis.call raises it as { err = text }).
        replies[q] = { 3, tostring(r.err) }
      else
        replies[q] = { 3, tostring(r) }
      end
    end
    kb = kb + counts[q]
  end
  return replies
end
-- End of group.lua.
