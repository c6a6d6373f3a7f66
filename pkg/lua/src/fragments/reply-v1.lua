-- fragments/reply-v1.lua: the reply of one request of rate-batch-v1.lua:
-- the committed flag, then seven fields per key (see the program's
-- header).
-- uses: serverNow
-- defines: newReply, replyKey, replyBefore

-- newReply: a request's reply of n keys, not committed, before its keys'
-- (made whole at once for one key).
local function newReply(n)
  if n == 1 then
    return { 0, false, false, false, false, false, false, false }
  end
  return { 0 }
end

-- replyKey sets key i's fields in out.
local function replyKey(out, i, status, eff, lim, remaining, retry, resetAt)
  local o = (i - 1) * 7
  out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7], out[o + 8] =
    status, serverNow, eff, lim, remaining, retry, resetAt
end

-- replyBefore sets key i's remaining and reset-at in out to those before
-- its cost (an allowed key whose request did not commit).
local function replyBefore(out, i, remainingBefore, resetBefore)
  local o = (i - 1) * 7
  out[o + 6], out[o + 8] = remainingBefore, resetBefore
end
-- End of reply-v1.lua.
