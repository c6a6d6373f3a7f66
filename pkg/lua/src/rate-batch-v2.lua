-- rate-batch-v2.lua: every limit of one Envoy request, all or nothing,
-- version 2 (docs/algorithms.md, limiter.Store): the state of a key is one
-- string with its expiry (string-v2.lua), read for the whole run with one
-- MGET (GET for a run of one key) and written with one SET.
--
-- One run evaluates a group of Envoy requests (limiter.Store batches), in
-- order, each all or nothing exactly as if it ran alone: a request sees
-- what the requests before it in the group committed.
--
-- KEYS[1..N]  the states (redis.StorageKey) of every request of the group,
--             request after request; on a Redis Cluster all in one slot
--             (one hash tag)
-- ARGV        one field per key, key i at ARGV[i]: its numbers, packed
--             big-endian as struct.pack('>BBddddddd') (lua.AppendBatchPacked):
--             one string and one struct.unpack per key instead of nine
--             decimal strings to intern and parse (each costs Redis CPU):
--       algorithm            1 fixed_window, 2 sliding_window, 3 token_bucket,
--                            4 gcra, 5 sliding_log
--       flags                bits 0-2 the role (limiter.Role): 0 ordinary,
--                            1 shadow, 2 quota, 3 check, 4 probe, 5 quota
--                            probe; 8 failOpen; 16 the penalty extension
--                            follows; 32 the calendar extension follows
--                            (fixed_window only); 64 the key charges always
--                            (a cost up to twice the limit, no penalty box);
--                            128 the reservation extension follows
--                            (lua.FlagRoleMask, lua.FlagFailOpen,
--                            lua.FlagPenalty, lua.FlagCalendar,
--                            lua.FlagCharge, lua.flagReserve)
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
--       cost                 1..limit (a key that charges always: 1..twice
--                            the limit)
--     then, when the flags' bit 16 is set, the penalty extension
--     (limiter.Penalty, penalty.lua), struct.pack('>ddd'):
--       duration ms          1..30 days
--       max duration ms      duration..30 days
--       decay ms             0..30 days
--     then, when the flags' bit 128 is set (a reserving policy,
--     limiter.Reserve: no penalty box, not a sliding log), the
--     reservation extension (reserve.lua), struct.pack('>ddddd'):
--       operation            1 reserve (the cost: the amount reserved), 2
--                            settle (the cost: the usage, 0 allowed)
--       TTL ms               1..24 hours
--       identity             a settle's reservation (0: none, a plain
--                            charge); 0 for a reserve
--       max cost             1..the ceiling (the reservations' bound)
--       period start         a calendar window's settle: the start of the
--                            period holding identity - TTL; else 0
--     then, when the flags' bit 32 is set, the calendar extension
--     (fragments/calendar.lua), struct.pack('>dddd'): the boundaries b0 <
--     b1 < b2 < b3, Unix ms, of three consecutive calendar periods (the one
--     before the sender's estimate of TIME, the one holding it, the one
--     after). The period holding the effective now is the window; a now
--     outside [b0, b3) answers CLOCK_UNSAFE and writes nothing. The last
--     extension present ends the argument.
--     Doubles carry every integer below 2^53 exactly; each is checked
--     integral and in range. No policy ID: the key names the policy, its
--     revision and the algorithm.
-- ARGV[N+1]   the group: per request struct.pack('>Hd'): its number of keys
--             (1..N, the counts adding up to N) and its deadline, in ms of
--             Redis's clock (TIME), an integer in [1, 2^53-1], or 0 for
--             none. When TIME is past a request's deadline its caller has
--             given up: the request is not evaluated, writes nothing and
--             replies { 2, serverNow } (see Reply).
-- A key whose fields are invalid answers INVALID (a failure, below). A
-- wrong number of arguments or a group field out of range is an error
-- reply for the whole group, found before anything is evaluated or
-- written.
--
-- It reads TIME once for the group, and every key's state with one MGET
-- (and, when one has none, one EXISTS of those: a key of another type is
-- STATE_INCOMPATIBLE, never overwritten); a run of one key with one GET
-- (its WRONGTYPE error tells the other type). For each request, it checks
-- every key in order, writing nothing: the state a key would have after an
-- allowed request is kept in the program, so a later key naming the same
-- state sees it. Then the request commits iff every ordinary key is
-- ALLOWED and, when there are quota keys, at least one of them is
-- (limiter.Commits: a failure status — CLOCK_UNSAFE, STATE_INCOMPATIBLE,
-- INVALID — counts as a denial, unless failOpen, when the key takes no
-- part; shadow and check keys never block, probe keys block as ordinary
-- ones do and quota probe keys as quota ones). On commit every ALLOWED
-- key but the check and probe ones is written: one SET of its whole state, with
-- PX, or KEEPTTL for a window written before in the same window (the last
-- state of a key named twice). A key that charges always (flag 64,
-- limiter.ChargeAlways; not a check or probe) is written whatever the
-- request commits: its cost when allowed, and when DENIED the cost
-- recorded anyway up to its ceiling, twice the limit (a token bucket in
-- debt is stored with its refill time after now), replying what one more
-- unit meets. An offence against a penalty box is
-- written once every key of the request has been evaluated, before the
-- commit's writes, whatever the request commits: the state as stored with
-- the new block (SET KEEPTTL) and its expiry raised (PEXPIRE GT). A
-- request that raises writes nothing.
--
-- Redis CPU per call bounds the service's throughput: a key costs one SET
-- when it commits, and the run one TIME and one MGET. Each function below
-- is a closure made once per run (docs/performance.md measures it); numbers
-- are replied as integers, not formatted. A request of one key, the common
-- one (every request of a run of one key), is evaluated by evaluateOne
-- (one.lua) in one function, a request of several by evaluate's loop over
-- its keys (evaluate.lua): both of key.lua's inline blocks, one definition
-- of each rule.
--
-- Reply: an array of one reply per request of the group, in order. A
-- request's reply is { 2, serverNowMillis } when past its deadline
-- (nothing evaluated or written); { 3, error text } when its evaluation
-- raised (a program defect: a number out of range; the other requests are
-- unaffected); otherwise an array of 2 + 4N integers (N: its keys):
--   1      committed: 1 or 0
--   2      serverNowMillis, Redis TIME, read once for the group
--   then per key four integers (reply-v2.lua):
--     code                 the status (limiter.Status: 1 ALLOWED, 2 DENIED,
--                          3 CLOCK_UNSAFE, 4 STATE_INCOMPATIBLE, 5 INVALID,
--                          6 BLOCKED) plus 8 times the ms the key's
--                          effective now is ahead of serverNow (the clock
--                          rule's clamp)
--     remaining            after this request (0 for the failure statuses;
--                          BLOCKED: the ms until the block ends, its
--                          remaining being 0)
--     retryAfterMillis     0 unless DENIED or BLOCKED (BLOCKED: the later
--                          of the block's end and the limit's own wait)
--     resetAtMillis        when the key is back to its full limit with no
--                          traffic (0 for the failure statuses)
--   then, per key with the reservation flag (bit 128), in key order: the
--   identity of the reservation it holds, 0 unless an ALLOWED reserve of
--   a committed request (its effective now plus the TTL, pushed up to 64
--   ms after the state's last identity); the units its subject's live
--   reservations hold after the key (before it, when it writes nothing);
--   the reservations it found expired and dropped (0 when it writes
--   nothing).
--   A reserve is written on commit, a settle whatever the request commits
--   (never blocking it): it removes its reservation and charges the
--   usage's excess as a charge does, up to the ceiling, or gives back its
--   shortfall by the algorithm's refund rule (algorithm.CheckRequest).
--   The limit is the policy's (the parser has it; 0 for INVALID). Every
--   number is checked integral and below 2^53 before it is returned, else
--   the program raises. An ALLOWED key that did not consume (the batch did
--   not commit, or a check or probe key) replies its remaining and reset-at
--   before its cost.
-- Runs on Redis 7.0+ and Valkey.

-- #include prelude.lua
-- #include time.lua
-- #include penalty.lua args blocked step
-- #include reserve.lua args
-- #include calendar.lua
-- #include fixed-window.lua step refund
-- #include sliding-window.lua step refund
-- #include token-bucket.lua step
-- #include gcra.lua step refund
-- #include sliding-log.lua step
-- #include algorithms.lua run
-- #include args-v2.lua
-- #include string-v2.lua load store
-- #include reserve.lua step
-- #include reply-v2.lua before
-- #include evaluate.lua
-- #include one.lua
-- #include group.lua

local nkeys = #KEYS
if nkeys < 1 or #ARGV ~= nkeys * NARG + 1 then
  return redis.error_reply('envoy-rls: rate-batch-v2 takes 1 argument per key and the group')
end
if nkeys == 1 then
  -- A run of one key: one request of it, without the group's tables.
  local dl = oneDeadline(ARGV[2])
  if dl then
    stored, storedOne = prefetch(1)
    return { requestReply(0, 1, dl, false) }
  end
end
local counts, deadlines, wrong = groupOf(ARGV[#ARGV], nkeys)
if not counts then
  return redis.error_reply('envoy-rls: rate-batch-v2: ' .. wrong)
end
stored, storedOne = prefetch(nkeys)
if #counts > 1 then
  written = {}
end
if nkeys > 1 then
  argsRead = {}
end
return runGroup(counts, deadlines)
