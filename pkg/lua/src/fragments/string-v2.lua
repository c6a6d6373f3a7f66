-- fragments/string-v2.lua: the state of rate-batch-v2.lua and
-- rate-refund-v2.lua, one string per key with its expiry (SET PX), in the
-- layout of lua.AppendState:
--   struct.pack('>Bdddd', head, lastObservedMs, epoch, level, carry)
--   head: the algorithm byte (limiter.Algorithm), plus STATE_PENALTY (64)
--         when the penalty box follows, plus STATE_RESERVED (32) when
--         reservations follow (a reserving policy: never with a penalty
--         box nor a sliding log):
--   struct.pack('>dd', penaltyUntilMs, penaltyLevel)   (level 1..99)
--   struct.pack('>H', count) and count (1..64) reservations, each
--     struct.pack('>dd', identity, amount) (algorithm.State.Reserved,
--     reserve.lua): identities ascending, amounts >= 1 but the last's,
--     which may be 0 (a settled identity kept)
--   then a sliding log's log, 10 bytes per entry (sliding-log.lua)
-- every number an integer in [0, 2^53-1]: 33 bytes, 49 with a penalty box,
-- 35 + 16 per reservation; one string Redis keeps inline (embstr) up to 44. The key names the
-- policy, its revision and the algorithm (redis.StorageKey); the value
-- carries no schema, policy ID or revision. Four sections: load (both
-- programs), encode (the refund program), value (an inline block of both:
-- encode's body, inline in the batch program's store, where a call per
-- write costs Redis CPU) and store (the batch program).
-- #section load
-- uses: unpack, unpackList, sub, find, MAX, MAX_SLIDING
-- defines: STATE_PENALTY, STATE_RESERVED, MGET_CHUNK, stored, storedOne, written, mgetAll, prefetch,
-- defines: decodeState, stateValue

local STATE_PENALTY, STATE_RESERVED = 64, 32
-- The most keys one MGET or EXISTS names (Lua's unpack of a list is
-- bounded; a group holds up to 8,192 keys).
local MGET_CHUNK = 1000
-- stored: the values of the run's keys (MGET) by their index in KEYS:
-- false none, '' a key of another type; false in a run of one key, whose
-- value is storedOne (no table made). written: false, or, when the run
-- evaluates several requests, the values it wrote by key, so that a later
-- request sees what an earlier one committed.
local stored, storedOne, written = false, false, false

-- mgetAll runs cmd ('MGET' or 'EXISTS') over the keys list (of n), in
-- chunks, and returns the MGET values in order (in the first chunk's reply
-- table, which the later chunks extend: no table is copied for a run of
-- one chunk), or false and the EXISTS count.
local function mgetAll(cmd, list, n)
  local out, count = false, 0
  for from = 1, n, MGET_CHUNK do
    local to = from + MGET_CHUNK - 1
    if to > n then
      to = n
    end
    local r = redis.call(cmd, unpackList(list, from, to))
    if cmd == 'EXISTS' then
      count = count + r
    elseif not out then
      out = r
    else
      for j = 1, #r do
        out[from + j - 1] = r[j]
      end
    end
  end
  return out, count
end

-- prefetch reads the values of the run's n keys, with one MGET (and, when
-- a key has none, one EXISTS of those keys: MGET reads a key of another
-- type as none; such a key is marked '', incompatible), and returns them
-- (stored) and false. A run of one key reads it with GET, whose WRONGTYPE
-- error tells a key of another type without an EXISTS (any other error is
-- raised, as redis.call would), and returns false and its value
-- (storedOne).
local function prefetch(n)
  if n == 1 then
    local v = redis.pcall('GET', KEYS[1])
    if type(v) == 'table' then
      if not find(tostring(v.err), '^WRONGTYPE') then
        error(v)
      end
      v = ''
    end
    return false, v
  end
  local vals = mgetAll('MGET', KEYS, n)
  local absent = {}
  for i = 1, n do
    if not vals[i] then
      absent[#absent + 1] = KEYS[i]
    end
  end
  if #absent > 0 then
    local _, found = mgetAll('EXISTS', absent, #absent)
    if found > 0 then
      for i = 1, n do
        if not vals[i] and redis.call('EXISTS', KEYS[i]) == 1 then
          vals[i] = ''
        end
      end
    end
  end
  return vals, false
end

-- decodeState reads a value of alg's state (v; false none). It returns st
-- (nil none, false incompatible, true), lastObservedMs, epoch, level, carry, the log (''
-- but for a sliding log, checked where its step reads it), penaltyUntilMs
-- and penaltyLevel (0, 0 without) and the reservations ('' without;
-- their numbers are checked where the reservation step reads them). A
-- value of another algorithm, of another length, with a number that is
-- not an integer in [0, 2^53-1] or a sliding window's count above any
-- sliding limit cannot be ours; nor, for a policy with a penalty box
-- (penalty), a block that ends at 0 or a level outside [1, 99]; nor
-- reservations but for a reserving policy (reserving). A policy without a
-- penalty box does not read its block: a block it cannot read is dropped,
-- one it can kept.
local function decodeState(v, alg, penalty, reserving)
  if not v then
    return nil, 0, 0, 0, 0, '', 0, 0, ''
  end
  local algorithm
  -- #include algorithms.lua byte
  local n = #v
  if n < 33 then
    return false, 0, 0, 0, 0, '', 0, 0, ''
  end
  local head, lastObservedMs, epoch, level, carry, pos = unpack('>Bdddd', v)
  local penaltyUntilMs, penaltyLevel, reserved = 0, 0, ''
  if head == algorithm + STATE_RESERVED and reserving and n >= 51 then
    local count
    count, pos = unpack('>H', v, pos)
    if count < 1 or n ~= 35 + count * 16 then
      return false, 0, 0, 0, 0, '', 0, 0, ''
    end
    reserved, pos = sub(v, pos), n + 1
  elseif head == algorithm + STATE_PENALTY and n >= 49 then
    penaltyUntilMs, penaltyLevel, pos = unpack('>dd', v, pos)
    if not (penaltyUntilMs >= 1 and penaltyUntilMs <= MAX and penaltyUntilMs % 1 == 0
        and penaltyLevel >= 1 and penaltyLevel <= 99 and penaltyLevel % 1 == 0) then
      if penalty then
        return false, 0, 0, 0, 0, '', 0, 0, ''
      end
      penaltyUntilMs, penaltyLevel = 0, 0
    end
  elseif head ~= algorithm then
    return false, 0, 0, 0, 0, '', 0, 0, ''
  end
  local log = ''
  if algorithm == 5 then
    log = sub(v, pos)
  elseif pos <= n then
    return false, 0, 0, 0, 0, '', 0, 0, ''
  end
  if not (lastObservedMs >= 0 and lastObservedMs <= MAX and lastObservedMs % 1 == 0
      and epoch >= 0 and epoch <= MAX and epoch % 1 == 0 and level >= 0 and level <= MAX and level % 1 == 0
      and carry >= 0 and carry <= MAX and carry % 1 == 0)
    or algorithm == 2 and (level > MAX_SLIDING or carry > MAX_SLIDING) then
    return false, 0, 0, 0, 0, '', 0, 0, ''
  end
  return true, lastObservedMs, epoch, level, carry, log, penaltyUntilMs, penaltyLevel, reserved
end

-- stateValue is the value of the group's key gi (key) as this run sees
-- it: what it wrote, else what it read (false: none; '': a key of another
-- type). Its state is decodeState's, but for none.
local function stateValue(key, gi)
  if written then
    local v = written[key]
    if v then
      return v
    end
  end
  if stored then
    return stored[gi]
  end
  return storedOne
end
-- #section encode
-- uses: pack, STATE_PENALTY, STATE_RESERVED
-- defines: encodeState

-- encodeState is the value of alg's state (the value block).
local function encodeState(alg, lastObservedMs, epoch, level, carry, penaltyUntilMs, penaltyLevel, log, reserved)
  local v
  -- #include string-v2.lua value
  return v
end
-- #section value
-- uses: pack, STATE_PENALTY, STATE_RESERVED
-- in: alg, lastObservedMs, epoch, level, carry, penaltyUntilMs, penaltyLevel,
-- in: log, reserved
-- out: v
-- defines: algorithm
-- v, the value of alg's state (decodeState's inverse): the penalty box
-- written when penaltyLevel is not 0, the reservations when there are.
local algorithm
-- #include algorithms.lua byte
if penaltyLevel > 0 then
  v = pack('>Bdddddd', algorithm + STATE_PENALTY, lastObservedMs, epoch, level, carry, penaltyUntilMs, penaltyLevel)
    .. log
elseif reserved ~= '' then
  v = pack('>BddddH', algorithm + STATE_RESERVED, lastObservedMs, epoch, level, carry, #reserved / 16) .. reserved
else
  v = pack('>Bdddd', algorithm, lastObservedMs, epoch, level, carry) .. log
end
-- #section store
-- uses: format, pack, sub, band, serverNow, written, stateValue, STATE_PENALTY,
-- uses: STATE_RESERVED
-- defines: KEEP_EXPIRY, offended, storeState, writeOffence

-- offended: false, or the keys this run wrote an offence to (their expiry
-- was raised to cover the block: a later write of their state only raises
-- it).
local offended = false

-- KEEP_EXPIRY: a ttl that keeps the key's expiry (a settle that gives
-- back: the expiry already covers every reservation it keeps).
local KEEP_EXPIRY = -1

-- storeState writes key's state (lastObservedMs, epoch, level, carry,
-- log, the penalty box penaltyUntilMs and penaltyLevel, the reservations
-- reserved) with an expiry ttl ms after lastObservedMs on the effective
-- clock: one SET. A window's state already written in the same window
-- (not fresh, its epoch unchanged from storedEpoch, the stored one)
-- without reservations keeps its expiry (KEEPTTL), which is the same
-- instant, as does a ttl of KEEP_EXPIRY. Numbers go to Redis as
-- format('%d') strings.
local function storeState(key, gi, fresh, alg, lastObservedMs, epoch, level, carry, log, ttl, storedEpoch,
                          penaltyUntilMs, penaltyLevel, reserved)
  local v
  -- #include string-v2.lua value
  if ttl == KEEP_EXPIRY or not fresh and epoch == storedEpoch and reserved == ''
    and (alg == 'fixed_window' or alg == 'sliding_window') then
    redis.call('SET', key, v, 'KEEPTTL')
  else
    if ttl < 1 then
      ttl = 1
    end
    -- (checkExact checked the expiry.)
    local px = format('%d', ttl + lastObservedMs - serverNow)
    if offended and offended[key] then
      redis.call('SET', key, v, 'KEEPTTL')
      redis.call('PEXPIRE', key, px, 'GT')
    else
      redis.call('SET', key, v, 'PX', px)
    end
  end
  if written then
    written[key] = v
  end
end

-- writeOffence writes an offence against a penalty box (penaltyStep) to
-- the state of the group's key gi (key), as stored: its penaltyUntilMs and
-- penaltyLevel, and its expiry raised to px ms.
local function writeOffence(key, gi, penaltyUntilMs, penaltyLevel, px)
  local v = stateValue(key, gi)
  -- (A compatible state: an offence needs one.)
  local head = unpack('>B', v)
  local rest = 34
  if band(head, 64) ~= 0 then
    rest = 50
  end
  v = pack('>B', band(head, 63) + 64) .. sub(v, 2, 33) .. pack('>dd', penaltyUntilMs, penaltyLevel) .. sub(v, rest)
  redis.call('SET', key, v, 'KEEPTTL')
  redis.call('PEXPIRE', key, format('%d', px), 'GT')
  if written then
    written[key] = v
  end
  if not offended then
    offended = {}
  end
  offended[key] = true
end
