-- tools/ceiling/rate-batch-v2-state.lua: NOT a rate limiter. A measuring
-- stub like rate-batch-v2.lua beside it (bench.sh --target ceiling-state
-- builds it into bin/envoy-rls-ceiling-state) that also does the Redis
-- work of any program that keeps its state in Redis: one MGET of the run's
-- keys and one SET PX of each key. Its count is the key's previous value
-- plus the cost, kept for the window (p2) from the write, never compared
-- with the limit: every key ALLOWED. It measures the most a rate program
-- with its state in Redis could give on this machine.
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
local stored = redis.call('MGET', unpack(KEYS))
local replies, kb, pos = {}, 0, 1
for q = 1, #group / 10 do
  local n, _dl
  n, _dl, pos = struct.unpack('>Hd', group, pos)
  local out = { 1, serverNow }
  for i = 1, n do
    local _, _, _, limit, window, _, _, _, cost = struct.unpack('>BBddddddd', ARGV[kb + i])
    redis.call('SET', KEYS[kb + i], (tonumber(stored[kb + i]) or 0) + cost, 'PX', window)
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
