-- rate-batch-v1.lua: every limit of one Envoy request, all or nothing,
-- version 1 (docs/algorithms.md, limiter.Store).
--
-- One run evaluates a group of Envoy requests (limiter.Store batches), in
-- order, each all or nothing exactly as if it ran alone: a request sees
-- what the requests before it in the group committed.
--
-- KEYS[1..N]  the state hashes (limiter.StorageKey) of every request of the
--             group, request after request; on a Redis Cluster all in one
--             slot (one hash tag)
-- ARGV        two fields per key, key i at ARGV[2*(i-1)+1 ..]:
--   1 policy ID            [a-z0-9._:/-]{1,128}
--   2 the numbers, packed big-endian as struct.pack('>BBddddddd'): one
--     string and one struct.unpack per key instead of nine decimal strings
--     to intern and parse (each costs Redis CPU):
--       algorithm            1 fixed_window, 2 sliding_window, 3 token_bucket,
--                            4 gcra, 5 sliding_log
--       flags                bits 0-2 the role (limiter.Role): 0 ordinary,
--                            1 shadow, 2 quota, 3 check, 4 probe, 5 quota
--                            probe; 8 failOpen; 16 the penalty extension
--                            follows; 32 the calendar extension follows
--                            (fixed_window only) (lua.FlagRoleMask,
--                            lua.FlagFailOpen, lua.FlagPenalty,
--                            lua.FlagCalendar)
--       policy revision      1..2^32-1
--       limit (capacity)     0..2^53-1 (sliding window: 0..(2^53-1)/10^6;
--                            token bucket: capacity * period + amount
--                            below 2^53; gcra: the burst, burst * period
--                            + amount below 2^53; sliding log:
--                            0..1000, MAX_LOG)
--       window ms (fixed, sliding, sliding log) | refill amount (token bucket, reduced)
--         | limit (gcra, reduced: the interval is period/amount ms)
--       0 (fixed, sliding, sliding log) | refill period ms (token bucket, gcra, reduced)
--       cleanup grace ms     0..ten years
--       max clock regression ms  0..ten years
--       cost                 1..limit
--     then, when the flags' bit 16 is set, the penalty extension
--     (limiter.Penalty, penalty.lua), struct.pack('>ddd'):
--       duration ms          1..30 days
--       max duration ms      duration..30 days
--       decay ms             0..30 days
--     then, when the flags' bit 32 is set, the calendar extension
--     (fragments/calendar.lua), struct.pack('>dddd'): the boundaries b0 <
--     b1 < b2 < b3, Unix ms, of three consecutive calendar periods (the one
--     before the sender's estimate of TIME, the one holding it, the one
--     after). The period holding the effective now is the window; a now
--     outside [b0, b3) answers CLOCK_UNSAFE and writes nothing. The last
--     extension present ends the argument.
--     Doubles carry every integer below 2^53 exactly; each is checked
--     integral and in range.
-- ARGV[2N+1]  the group: per request struct.pack('>Hd'): its number of keys
--             (1..N, the counts adding up to N) and its deadline, in ms of
--             Redis's clock (TIME), an integer in [1, 2^53-1], or 0 for
--             none. When TIME is past a request's deadline its caller has
--             given up: the request is not evaluated, writes nothing and
--             replies { 2, serverNow } (see Reply).
-- A key whose fields are invalid answers INVALID (a failure, below). A
-- wrong number of arguments, a packed field of the wrong length, or a group
-- field out of range is an error reply for the whole group, found before
-- anything is evaluated or written.
--
-- It reads TIME once for the group. For each request, it checks every key in
-- order, writing nothing: the state a key would have after an allowed
-- request is kept in the program, so a later key naming the same hash sees
-- it. Then the request commits iff
-- every ordinary key is ALLOWED and, when there are quota keys, at least one
-- of them is (limiter.Commits: a failure status — CLOCK_UNSAFE,
-- STATE_INCOMPATIBLE, INVALID — counts as a denial, unless failOpen, when
-- the key takes no part; shadow and check keys never block, probe keys
-- block as ordinary ones do and quota probe keys as quota ones). On commit
-- every ALLOWED key but the check and probe ones is written: one HSET (of
-- every field for a new hash, otherwise of last, b and whichever of a and c
-- changed; a sliding log's last, a, b, c and its log l) and one PEXPIRE per
-- key (the last state of a key named twice). An offence against a penalty
-- box (a denial of an ordinary, shadow or quota key; never of a check or
-- probe key) is written once every key of the request has been evaluated,
-- before the commit's writes, whatever the request commits (penalty.lua):
-- a request that raises writes nothing.
--
-- Redis CPU per call bounds the service's throughput, and the whole body of a
-- script runs on every EVALSHA: this program defines one function (the
-- evaluation of one request, run under pcall so that a request that raises
-- fails alone; one closure per run, shared by the group) and makes no table
-- per key. The
-- fragments are blocks on the locals declared below; what a later key or
-- the commit needs of a key is kept in one flat array, made only for a
-- batch of several keys (a single key needs only the locals). Numbers are
-- replied as integers, not formatted.
--
-- Reply: an array of one reply per request of the group, in order. A
-- request's reply is an array of 2 values when past its deadline:
--   1      2 (integer): expired, nothing evaluated or written
--   2      serverNowMillis, Redis TIME
-- or, when its evaluation raised (a program defect: a number out of range),
-- an array of 2 values:
--   1      3 (integer): failed; the other requests are unaffected
--   2      the error text (bulk string)
-- otherwise an array of 1 + 7N values (N: the request's keys)
--   1      committed: 1 or 0 (integer)
--   then per key seven fields:
--     status               ALLOWED | DENIED | BLOCKED | CLOCK_UNSAFE |
--                          STATE_INCOMPATIBLE | INVALID (bulk string);
--                          BLOCKED: in the penalty box (penalty.lua)
--     serverNowMillis      Redis TIME, read once for the batch
--     effectiveNowMillis   serverNow, or the stored last-observed time when
--                          the clock stepped back by at most the allowed
--                          regression
--     limit                the policy limit (0 for INVALID)
--     remaining            after this request (0 for the failure statuses)
--     retryAfterMillis     0 unless DENIED
--     resetAtMillis        when the key is back to its full limit with no
--                          traffic (docs/algorithms.md; 0 for the failure
--                          statuses)
--   The six numbers are integers, exact below 2^53: each is checked
--   integral and in range before it is returned, else the program raises.
--   CLOCK_UNSAFE and STATE_INCOMPATIBLE reply (serverNow, serverNow, limit,
--   0, 0, 0), INVALID (serverNow, serverNow, 0, 0, 0, 0). An ALLOWED key
--   that did not consume (the batch did not commit, or a check or probe
--   key) replies its remaining and reset-at before its cost (limiter.Check's
--   uncommitted reply).
-- Runs on Redis 7.0+ and Valkey.

-- #include prelude.lua
-- #include time.lua

local NARG = 2
-- WIDE: above this many keys a request finds the keys naming the same hash
-- through two tables (seen, lastWrite) instead of scanning.
local WIDE = 32
local nkeys = #KEYS
local unpack = struct.unpack
if nkeys < 1 or #ARGV ~= nkeys * NARG + 1 then
  return redis.error_reply('envoy-rls: rate-batch-v1 takes 2 arguments per key and the group')
end
-- The group, checked whole before anything is evaluated: per request its
-- number of keys and its deadline.
local group = ARGV[#ARGV]
local nreq = #group / 10
if nreq < 1 or nreq % 1 ~= 0 then
  return redis.error_reply('envoy-rls: rate-batch-v1: the group field is not 10 bytes per request')
end
local counts, deadlines = {}, {}
do
  local pos, total = 1, 0
  for q = 1, nreq do
    local kn, dl
    kn, dl, pos = unpack('>Hd', group, pos)
    total = total + kn
    if kn < 1 or total > nkeys or not (dl == 0 or dl >= 1 and dl <= MAX and dl % 1 == 0) then
      return redis.error_reply('envoy-rls: rate-batch-v1: request ' .. q .. ' of the group: key count or deadline out of range')
    end
    counts[q], deadlines[q] = kn, dl
  end
  if total ~= nkeys then
    return redis.error_reply('envoy-rls: rate-batch-v1: the group names ' .. total .. ' keys, KEYS has ' .. nkeys)
  end
end

-- serverNow formatted, once for every key that writes it.
local nowS = false

-- evaluate is one request: its n keys start after the group's first kb.
-- It returns the request's reply.
local function evaluate(kb, n)
local blocked, quota, quotaAllows = false, 0, false

-- The fragments' In and Out names, for the key being evaluated (and, after
-- the loop, for a single key's commit and reply): its arguments, its
-- state, the algorithm's result, whether it is to be written, its reply.
local key, alg, policy, rev, limit, p2, p3, grace, maxRegression, cost
local st, stLast, stA, stB, stC, stL, fresh, hashA, hashC
local now, allowed, a, b, c, l, ttl, remaining, retry, resetAt, remainingBefore, resetBefore
local write, status, eff, lim
local cal, cb0, cb1, cb2, cb3
-- The penalty box (penalty.lua): the key's penalty arguments, the hash's
-- penalty fields, the request's offences (false until one is found).
local pen, penDur, penMax, penDecay, stPu, stPn
local offences = false

-- rec: for a batch of several keys, R values per key i, at
-- (i - 1) * R + one of these offsets:
--   R_KIND      what a later key naming the same hash sees after key i:
--               0 nothing (key i was INVALID: look further back), 1 no
--               state, 2 incompatible, 3 the state R_LAST..R_C
--   R_LAST, R_A, R_B, R_C, R_L   the tentative write, or the state key i
--               saw (R_L: a sliding log's log, else '')
--   R_FRESH     no hash before this call
--   R_HASH_A, R_HASH_C      the hash's a and c
--   R_WRITE     ALLOWED and not a check or probe key; to write it or, when
--               the batch does not commit, to reply before the cost:
--   R_TTL, R_REMAINING_BEFORE, R_RESET_BEFORE, R_ALG, R_REV
--   R_PU, R_PN  the hash's penalty fields as key i left them (penalty.lua)
-- All filled (no nil), so the table stays one array.
local R_KIND, R_LAST, R_A, R_B, R_C, R_FRESH, R_HASH_A, R_HASH_C = 1, 2, 3, 4, 5, 6, 7, 8
local R_WRITE, R_TTL, R_REMAINING_BEFORE, R_RESET_BEFORE, R_ALG, R_REV, R_L = 9, 10, 11, 12, 13, 14, 15
local R_PU, R_PN = 16, 17
local R = 17
local rec, out = false, false
if n > 1 then
  rec, out = {}, { 0, false, false, false, false, false, false, false }
end
-- For a wide request, the keys a later key looks back to and forward to,
-- by key name: seen[key] the last earlier key naming it whose record
-- counts (R_KIND not 0), lastWrite[key] the last key naming it that writes.
-- Scanning the keys instead is cheaper for a few keys and quadratic for
-- many (a request of 64 descriptors with 16 limits each has 1,024).
local seen, lastWrite = false, false
if n > WIDE then
  seen, lastWrite = {}, {}
end

for i = 1, n do
  key, policy = KEYS[kb + i], ARGV[(kb + i - 1) * NARG + 1]
  local algorithm, flags, pos
  local packed = ARGV[(kb + i - 1) * NARG + 2]
  algorithm, flags, rev, limit, p2, p3, grace, maxRegression, cost, pos = unpack('>BBddddddd', packed)
  alg, cal = false, false
  local role, failOpen = 0, false
  local valid = true
-- #include penalty.lua valid
-- #include valid.lua
  -- The algorithm dispatch, by the algorithm byte (limiter.Algorithm): its
  -- name and its argument rules (its fragment's valid section).
  if algorithm == 1 then
    alg = 'fixed_window'
-- #include fixed-window.lua valid
  elseif algorithm == 2 then
    alg = 'sliding_window'
-- #include sliding-window.lua valid
  elseif algorithm == 3 then
    alg = 'token_bucket'
-- #include token-bucket.lua valid
  elseif algorithm == 4 then
    alg = 'gcra'
-- #include gcra.lua valid
  elseif algorithm == 5 then
    alg = 'sliding_log'
-- #include sliding-log.lua valid
  else
    valid = false
  end
  if valid and bit.band(flags, CALENDAR) ~= 0 then
-- #include calendar.lua valid
  end
  if valid then
    role = bit.band(flags, ROLE_BITS)
    failOpen = bit.band(flags, FAIL_OPEN) ~= 0
  end
  -- A key that is not evaluated (INVALID, STATE_INCOMPATIBLE,
  -- CLOCK_UNSAFE) replies (serverNow, serverNow, limit or 0, 0, 0, 0).
  write, stL, l = false, '', ''
  local kind = 0
  if not valid then
    status, eff, lim, remaining, retry, resetAt = 'INVALID', serverNow, 0, 0, 0, 0
  else
    lim = limit
    -- The state: what the last earlier key naming this hash left, else
    -- the hash.
    local j = 0
    if seen then
      j = seen[key] or 0
    elseif rec then
      for k = i - 1, 1, -1 do
        if KEYS[kb + k] == key and rec[(k - 1) * R + R_KIND] ~= 0 then
          j = k
          break
        end
      end
    end
    if j == 0 then
-- #include load.lua
      fresh, hashA, hashC = st == nil, stA, stC
      stPu, stPn = 0, 0
      if pen then
-- #include penalty.lua load
      end
    else
      local o = (j - 1) * R
      kind, stLast, stA, stB, stC, fresh, hashA, hashC, stL = rec[o + R_KIND], rec[o + R_LAST], rec[o + R_A],
        rec[o + R_B], rec[o + R_C], rec[o + R_FRESH], rec[o + R_HASH_A], rec[o + R_HASH_C], rec[o + R_L]
      stPu, stPn = rec[o + R_PU], rec[o + R_PN]
      st = nil
      if kind == 2 then
        st = false
      elseif kind == 3 then
        st = true
      end
    end
    if st == false then
      status, eff, remaining, retry, resetAt = 'STATE_INCOMPATIBLE', serverNow, 0, 0, 0
    else
-- #include clock.lua
-- #include calendar.lua clock
      if not now then
        status, eff, remaining, retry, resetAt = 'CLOCK_UNSAFE', serverNow, 0, 0, 0
      else
        eff = now
        -- The step dispatch: the algorithm's step section.
        if alg == 'fixed_window' then
-- #include fixed-window.lua step
        elseif alg == 'sliding_window' then
-- #include sliding-window.lua step
        elseif alg == 'token_bucket' then
-- #include token-bucket.lua step
        elseif alg == 'gcra' then
-- #include gcra.lua step
        elseif alg == 'sliding_log' then
-- #include sliding-log.lua step
        end
        status = false
        if st == false then
          -- A stored log that cannot be ours (the sliding log's step).
          status, eff, remaining, retry, resetAt = 'STATE_INCOMPATIBLE', serverNow, 0, 0, 0
        elseif pen and st then
-- #include penalty.lua step
        end
        if status then
          -- STATE_INCOMPATIBLE, or BLOCKED (penalty.lua): nothing written.
        elseif not allowed then
          status = 'DENIED'
        elseif role >= 3 then
          -- A check or (quota) probe key: its reply before the cost, never
          -- written.
          status, remaining, resetAt = 'ALLOWED', remainingBefore, resetBefore
        else
          status, write = 'ALLOWED', true
        end
      end
    end
  end
-- #include exact.lua
  if rec then
    if valid then
      kind = 3
      if write then
        stLast, stA, stB, stC, stL = now, a, b, c, l
      elseif st == nil then
        kind = 1
      elseif st == false then
        kind, stLast, stA, stB, stC, stL, hashA, hashC, stPu, stPn = 2, 0, 0, 0, 0, '', 0, 0, 0, 0
      end
    else
      stLast, stA, stB, stC, stL, fresh, hashA, hashC, stPu, stPn = 0, 0, 0, 0, '', false, 0, 0, 0, 0
    end
    local wTtl, wRemainingBefore, wResetBefore, wAlg, wRev = 0, 0, 0, false, 0
    if write then
      wTtl, wRemainingBefore, wResetBefore, wAlg, wRev = ttl, remainingBefore, resetBefore, alg, rev
    end
    local o = (i - 1) * R
    rec[o + R_KIND], rec[o + R_LAST], rec[o + R_A], rec[o + R_B], rec[o + R_C], rec[o + R_FRESH],
      rec[o + R_HASH_A], rec[o + R_HASH_C], rec[o + R_WRITE], rec[o + R_TTL], rec[o + R_REMAINING_BEFORE],
      rec[o + R_RESET_BEFORE], rec[o + R_ALG], rec[o + R_REV], rec[o + R_L], rec[o + R_PU], rec[o + R_PN] =
      kind, stLast, stA, stB, stC, fresh, hashA, hashC, write, wTtl, wRemainingBefore, wResetBefore, wAlg, wRev, stL,
      stPu or 0, stPn or 0
    if seen then
      if kind ~= 0 then
        seen[key] = i
      end
      if write then
        lastWrite[key] = i
      end
    end
  end
  -- limiter.Commits
  if role ~= 1 and role ~= 3 then
    if failOpen and status ~= 'ALLOWED' and status ~= 'DENIED' and status ~= 'BLOCKED' then
      -- A fail-open failure takes no part.
    elseif role == 2 or role == 5 then
      quota = quota + 1
      if status == 'ALLOWED' then
        quotaAllows = true
      end
    elseif status ~= 'ALLOWED' then
      blocked = true
    end
  end
  if out then
    local o = (i - 1) * 7
    out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6], out[o + 7], out[o + 8] =
      status, serverNow, eff, lim, remaining, retry, resetAt
  end
end

-- The offences found (penalty.lua), now that no key of the request can
-- raise any more: written whatever the request commits, in key order (a
-- later offence against the same hash builds on an earlier one).
if offences then
  for j = 1, #offences, 4 do
    local k = offences[j]
    redis.call('HSET', k, 'pu', format('%d', offences[j + 1]), 'pn', format('%d', offences[j + 2]))
    redis.call('PEXPIRE', k, format('%d', offences[j + 3]), 'GT')
  end
end

local commit = not blocked and (quota == 0 or quotaAllows)
for i = 1, n do
  if rec then
    -- Key i's write, unless a later key naming the same hash writes (the
    -- last write of a key is the one committed).
    local o = (i - 1) * R
    write = rec[o + R_WRITE]
    if write and commit then
      key = KEYS[kb + i]
      if lastWrite then
        write = lastWrite[key] == i
      else
        for k = i + 1, n do
          if KEYS[kb + k] == key and rec[(k - 1) * R + R_WRITE] then
            write = false
            break
          end
        end
      end
      if write then
        now, a, b, c, fresh, hashA, hashC, ttl, alg, rev, policy, l =
          rec[o + R_LAST], rec[o + R_A], rec[o + R_B], rec[o + R_C], rec[o + R_FRESH], rec[o + R_HASH_A],
          rec[o + R_HASH_C], rec[o + R_TTL], rec[o + R_ALG], rec[o + R_REV], ARGV[(kb + i - 1) * NARG + 1], rec[o + R_L]
      end
    elseif write then
      remainingBefore, resetBefore = rec[o + R_REMAINING_BEFORE], rec[o + R_RESET_BEFORE]
    end
  end
  if write then
    if commit then
-- #include store.lua
    else
      -- Not consumed: the reply before the cost (exact.lua checked it).
      if out then
        local o = (i - 1) * 7
        out[o + 6], out[o + 8] = remainingBefore, resetBefore
      else
        remaining, resetAt = remainingBefore, resetBefore
      end
    end
  end
end
local committed = 0
if commit then
  committed = 1
end
if not out then
  -- One key: its reply is still in the locals.
  return { committed, status, serverNow, eff, lim, remaining, retry, resetAt }
end
out[1] = committed
return out
end

-- The requests in order, each under pcall: one that raises (before it
-- writes: exact.lua runs before store.lua) fails alone.
local replies, kb = {}, 0
for q = 1, nreq do
  if deadlines[q] ~= 0 and serverNow > deadlines[q] then
    replies[q] = { 2, serverNow }
  else
    local ok, r = pcall(evaluate, kb, counts[q])
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
