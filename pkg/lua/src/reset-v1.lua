-- reset-v1.lua: one key of a policy reset (the Redis store's
-- ResetPolicy): delete it only when it holds a state this version writes.
-- The check and the delete are one atomic run, so a key that is not such a
-- state (another program's, in the same Redis), or that became something
-- else after the scan found it, is never deleted. Version 1.
--
-- KEYS[1]  a key the scan found, whose name the caller matched to a layout
-- ARGV[1]  the layout of that name: 2, redis.StorageKey's, named for the
--          policy being reset: a state of rate-batch-v2.lua (decodeState's
--          layout, of any rate algorithm) or a lease set of the lease program
--          (whole 10-byte entries struct.pack('>dH', expiryMillis, count),
--          1 to 10,000 of them, expiries in order, counts at least 1);
--          1, redis.StorageKeyV1's: a hash of rate-batch-v1.lua, whose
--          `schema` is 1 and whose `policy` and `rev` name its policy
-- ARGV[2]  layout 1: the policy ID being reset
-- ARGV[3]  layout 1: its revision, in decimal
--
-- Reply: one integer: 1 deleted (UNLINK); 0 not a state of envoy-rls, left
-- alone; 2 a state of another policy or revision (layout 1), left alone;
-- 3 no such key (it expired after the scan). One GET (layout 2) or one
-- HMGET and, for a hash without its fields, one EXISTS (layout 1), then at
-- most one UNLINK: commands the documented ACL user may run
-- (docs/redis.md). Any other error than WRONGTYPE is raised.

-- #include prelude.lua
-- #include string-v2.lua load

local ENTRY = 10 -- limiter.SlidingLogEntryBytes: a log's or a lease set's entry
local MAX_LEASES = 10000 -- limiter.MaxConcurrency: a lease set's most entries
local DELETED, FOREIGN, OTHER, GONE = 1, 0, 2, 3
local ALGORITHMS = { 'fixed_window', 'sliding_window', 'token_bucket', 'gcra', 'sliding_log' }

-- entries reports whether s is whole entries in the order the programs
-- keep them: expiries or hit times integers in [from, upTo], not
-- decreasing, counts at least 1.
local function entries(s, from, upTo)
  if #s % ENTRY ~= 0 then
    return false
  end
  local prev = from
  for pos = 1, #s, ENTRY do
    local at, count = unpack('>dH', s, pos)
    if not (at >= prev and at <= upTo and at % 1 == 0 and count >= 1) then
      return false
    end
    prev = at
  end
  return true
end

-- rateState reports whether v is a state rate-batch-v2.lua writes: its
-- head names a rate algorithm, decodeState reads it (a penalty box or
-- reservations it holds must be one), and a sliding log's log is what its
-- step reads (whole entries, at most MAX_LOG, times up to the last
-- observed one).
local function rateState(v)
  local alg = ALGORITHMS[(string.byte(v, 1) or 0) % STATE_RESERVED]
  if not alg then
    return false
  end
  local st, lastObservedMs, _, level, carry, log = decodeState(v, alg, true, true)
  if not st then
    return false
  end
  if alg == 'sliding_log' then
    return level <= MAX_LOG and carry <= MAX_LOG and #log <= ENTRY * MAX_LOG and entries(log, 0, lastObservedMs)
  end
  return true
end

-- leaseSet reports whether v is a lease set the lease program writes (it
-- deletes a set whose last lease it removes: never an empty one).
local function leaseSet(v)
  return #v > 0 and #v <= ENTRY * MAX_LEASES and entries(v, 1, MAX)
end

-- ours classifies the key: FOREIGN, GONE, OTHER, or DELETED when it is to
-- be deleted.
local function ours(key, layout, policy, rev)
  if layout == '2' then
    local v = redis.pcall('GET', key)
    if type(v) == 'table' then
      if not find(tostring(v.err), '^WRONGTYPE') then
        error(v)
      end
      return FOREIGN
    elseif not v then
      return GONE
    elseif rateState(v) or leaseSet(v) then
      return DELETED
    end
    return FOREIGN
  elseif layout ~= '1' or not find(rev, '^%d+$') then
    error('envoy-rls: reset-v1.lua: invalid arguments')
  end
  local h = redis.pcall('HMGET', key, 'schema', 'policy', 'rev')
  if h.err then
    if not find(tostring(h.err), '^WRONGTYPE') then
      error(h)
    end
    return FOREIGN
  elseif not (h[1] or h[2] or h[3]) and redis.call('EXISTS', key) == 0 then
    return GONE
  elseif not (h[1] == '1' and h[2] and h[2] ~= '' and h[3] and find(h[3], '^%d+$')) then
    return FOREIGN
  elseif h[2] ~= policy or h[3] ~= rev then
    return OTHER
  end
  return DELETED
end

if #KEYS ~= 1 or #ARGV < 1 then
  error('envoy-rls: reset-v1.lua: invalid arguments')
end
local result = ours(KEYS[1], ARGV[1], ARGV[2] or '', ARGV[3] or '')
if result == DELETED then
  redis.call('UNLINK', KEYS[1])
end
return result
