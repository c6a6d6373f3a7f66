-- fragments/reply-v2.lua: the reply of one request of rate-batch-v2.lua:
-- committed, serverNow, then four integers per key: code (the status,
-- limiter.Status: 1 ALLOWED, 2 DENIED, 3 CLOCK_UNSAFE, 4
-- STATE_INCOMPATIBLE, 5 INVALID, 6 BLOCKED; plus 8 times the ms the
-- effective now is ahead of serverNow), remaining (BLOCKED: the ms until
-- its block ends, its remaining being 0), retryAfterMillis,
-- resetAtMillis. The limit is the policy's (0 for INVALID): the parser has
-- it. Sections: before, a function; new, one, key and code, inline
-- blocks of a request's evaluation (a call per request and per key costs
-- Redis CPU): new the reply of a request of several keys, key the fields
-- of one of its keys, one the whole reply of a request of one key, code a
-- status's code.
-- #section before
-- defines: replyBefore

-- replyBefore sets key i's remaining and reset-at in out to those before
-- its cost (an allowed key whose request did not commit).
local function replyBefore(out, i, remainingBefore, resetBefore)
  local o = (i - 1) * 4
  out[o + 4], out[o + 6] = remainingBefore, resetBefore
end
-- #section new
-- uses: serverNow
-- in:
-- out: out
-- out, a request's reply of n keys (several), not committed, before its
-- keys'.
out = { 0, serverNow }
-- #section one
-- uses: serverNow
-- in: status, eff, remaining, retry, resetAt
-- out: out
-- defines: code
-- out, the reply of a request of one key, not committed, made whole at
-- once: its fields as the key block sets them.
-- #include reply-v2.lua code
out = { 0, serverNow, code + 8 * (eff - serverNow), remaining, retry, resetAt }
-- #section key
-- uses: serverNow
-- in: out, i, status, eff, remaining, retry, resetAt
-- out:
-- defines: code, o
-- Key i's fields in out: its status's code, its effective now's lead over
-- serverNow, and the rest.
-- #include reply-v2.lua code
local o = (i - 1) * 4
out[o + 3], out[o + 4], out[o + 5], out[o + 6] = code + 8 * (eff - serverNow), remaining, retry, resetAt
-- #section code
-- in: status
-- out:
-- defines: code
-- The status's code (1 ALLOWED, the common one, first).
local code = 1
if status == 'ALLOWED' then
  code = 1
elseif status == 'DENIED' then
  code = 2
elseif status == 'CLOCK_UNSAFE' then
  code = 3
elseif status == 'STATE_INCOMPATIBLE' then
  code = 4
elseif status == 'INVALID' then
  code = 5
else
  code = 6
end
