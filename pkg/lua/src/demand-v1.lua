-- demand-v1.lua: one replica's turn in the exchange of RLQS demands of one
-- aggregate (one limit's subject): publish its own, read the other live
-- replicas'. Version 1.
--
-- KEYS[1]  the aggregate's hash (redis.DemandKey): field = a replica's
--          identity, value = struct.pack('>d', expiresAtMillis) followed by
--          its demands, 8-byte big-endian integers the program never reads
-- ARGV[1]  this replica's identity, 1 to 64 bytes
-- ARGV[2]  how long its entry lives, in ms: 1..3600000 (lua.MaxDemandTTL)
-- ARGV[3]  its demands: 0 to 1024 (lua.MaxDemands) 8-byte integers
--
-- At TIME (now), another replica's entry is live until its expiry. When
-- 64 other replicas (lua.MaxDemandReplicas) hold live entries, the
-- program raises an error and writes nothing: so no hash it writes holds
-- more than 64 fields, and one that does (HLEN, read first) is not one of
-- its hashes: an error, nothing read or written. Else it deletes the
-- entries that are not live (HDEL): expired, or not an entry this program
-- writes (another length, an expiry that is not an integer or is more than
-- MAX_TTL ahead); writes its own, expiring at now + ARGV[2] (HSET); and
-- gives the key the expiry of its latest live entry (PEXPIRE). Commands:
-- TIME, HLEN, HGETALL, HDEL, HSET, PEXPIRE, which the documented ACL user
-- may run (docs/redis.md).
--
-- Reply: an array of the other live replicas' demands, one string per
-- replica (ARGV[3] as that replica wrote it), in no order: at most 63.

local MAX_TTL = 3600000 -- lua.MaxDemandTTL in ms
local MAX_DEMANDS = 1024 -- lua.MaxDemands
local MAX_REPLICAS = 64 -- lua.MaxDemandReplicas
local MAX_ID = 64 -- the longest replica identity
local HEAD = 8 -- the expiry's bytes
local unpack, pack, sub, find = struct.unpack, struct.pack, string.sub, string.find

local key, me, ttl, mine = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
if #KEYS ~= 1 or not me or #me < 1 or #me > MAX_ID or not ttl or not find(ttl, '^[1-9]%d?%d?%d?%d?%d?%d?$')
    or ttl + 0 > MAX_TTL or not mine or #mine % 8 ~= 0 or #mine > 8 * MAX_DEMANDS then
  error('envoy-rls: demand-v1.lua: invalid arguments')
end
ttl = ttl + 0

-- now: TIME in ms, its microseconds floored (below 1e6, where % is exact).
local now
do
  local t = redis.call('TIME')
  local us = t[2] + 0
  now = t[1] * 1000 + (us - us % 1000) / 1000
end

-- live is the expiry of an entry v that is live at now, or nil when v
-- has expired or is not an entry this program writes: whole demands after
-- an integer expiry, at most MAX_TTL after now.
local function live(v)
  local n = #v - HEAD
  if n < 0 or n % 8 ~= 0 or n > 8 * MAX_DEMANDS then
    return nil
  end
  local at = unpack('>d', v)
  if not (at > now and at <= now + MAX_TTL and at % 1 == 0) then
    return nil
  end
  return at
end

if redis.call('HLEN', key) > MAX_REPLICAS then
  error('envoy-rls: demand-v1.lua: more fields than a demand hash holds')
end
local all = redis.call('HGETALL', key)
local others, dead, latest = {}, {}, now + ttl
for i = 1, #all, 2 do
  local field, v = all[i], all[i + 1]
  if field ~= me then
    local at = live(v)
    if at then
      others[#others + 1] = sub(v, HEAD + 1)
      if at > latest then
        latest = at
      end
    else
      dead[#dead + 1] = field
    end
  end
end
if #others >= MAX_REPLICAS then
  error('envoy-rls: demand-v1.lua: 64 other replicas publish demands')
end
for i = 1, #dead do
  redis.call('HDEL', key, dead[i])
end
redis.call('HSET', key, me, pack('>d', now + ttl) .. mine)
redis.call('PEXPIRE', key, latest - now)
return others
