-- fragments/group.lua: the group of a rate program's run, its last ARGV
-- field: per request struct.pack('>Hd'), its number of keys and its
-- deadline in ms of Redis's clock (0: none).
-- uses: MAX, unpack, serverNow, evaluate, evaluateOne
-- defines: groupOf, oneDeadline, requestReply, runGroup

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

-- oneDeadline is, for the group field of a run of one key, the deadline
-- of its one request when the field is one request of one key with a
-- deadline in range (the common run: groupOf's tables are not made, a
-- table per run costing Redis CPU to make and to collect); false
-- otherwise, when groupOf tells what is wrong.
local function oneDeadline(group)
  if #group == 10 then
    local kn, dl = unpack('>Hd', group)
    if kn == 1 and (dl == 0 or dl >= 1 and dl <= MAX and dl % 1 == 0) then
      return dl
    end
  end
  return false
end

-- requestReply is the reply of the request whose n keys start after the
-- group's first kb, with deadline dl (rec: evaluate's record array),
-- evaluated by evaluateOne when it has one key, else by evaluate. A
-- request whose deadline serverNow is past is not evaluated. It is
-- evaluated under pcall: one that raises (before it writes: the exactness
-- check runs before any write) fails alone.
local function requestReply(kb, n, dl, rec)
  if dl ~= 0 and serverNow > dl then
    return { 2, serverNow }
  end
  local ok, r
  if n == 1 then
    ok, r = pcall(evaluateOne, kb)
  else
    ok, r = pcall(evaluate, kb, n, rec)
  end
  if ok then
    return r
  elseif type(r) == 'table' then
    -- A command's error reply (redis.call raises it as { err = text }).
    return { 3, tostring(r.err) }
  end
  return { 3, tostring(r) }
end

-- runGroup evaluates the requests in order (requestReply) and returns the
-- replies, one per request.
local function runGroup(counts, deadlines)
  local replies, kb, rec = {}, 0, {}
  for q = 1, #counts do
    replies[q] = requestReply(kb, counts[q], deadlines[q], rec)
    kb = kb + counts[q]
  end
  return replies
end
-- End of group.lua.
