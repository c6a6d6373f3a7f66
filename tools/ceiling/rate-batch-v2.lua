-- tools/ceiling/rate-batch-v2.lua: NOT a rate limiter. A measuring stub
-- that tools/scripts/bench.sh --target ceiling builds into a throw-away copy of
-- envoy-rls (bin/envoy-rls-ceiling) in place of pkg/lua's batch program, to
-- measure the most any batch program could give on this machine: the same
-- FCALL (bench.sh wraps it as a function library; EVALSHA where Redis has no
-- functions), keys and arguments, one TIME, no state read or written, every key
-- ALLOWED. It answers as a fixed window whose window is the packed
-- argument's p2 (the bench rules are fixed windows). Self-contained: it
-- reads TIME as pkg/lua's programs do, and nothing else.
local serverNow
do
  local t = redis.call('TIME')
  local us = t[2] + 0
  serverNow = t[1] * 1000 + (us - us % 1000) / 1000
end
-- The group field (ARGV's last) gives each request's number of keys; each
-- request replies committed, serverNow and four integers per key (the
-- status ALLOWED is 1), in one array per request.
local group = ARGV[#ARGV]
local replies, kb, pos = {}, 0, 1
for q = 1, #group / 10 do
  local n, _dl
  n, _dl, pos = struct.unpack('>Hd', group, pos)
  local out = { 1, serverNow }
  for i = 1, n do
    local _, _, _, limit, window, _, _, _, cost = struct.unpack('>BBddddddd', ARGV[kb + i])
    local o = (i - 1) * 4 + 2
    out[o + 1] = 1
    out[o + 2] = limit - cost
    out[o + 3] = 0
    out[o + 4] = serverNow - serverNow % window + window
  end
  replies[q] = out
  kb = kb + n
end
return replies
