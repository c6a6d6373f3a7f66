-- fragments/store.lua: write one state hash. In: key, fresh (no hash before
-- this program), alg, policy, rev, now, a, b, c, l (a sliding log's log),
-- ttl, and hashA, hashC (the
-- a and c the hash holds, as load.lua read them); serverNow and nowS (false,
-- or serverNow formatted: the last of every key written at serverNow, made
-- once per program). One HSET, then the TTL
-- (one PEXPIRE, when it changes: see below). A new hash gets every field; an existing one only last, b
-- and whichever of a and c changed (a fixed window's c is always 0, a
-- window's a changes once per window): hash fields are canonical decimal
-- strings, so an equal number is an equal string, and every argument left
-- out is Redis CPU saved. Numbers go to Redis as format('%d') strings, the
-- canonical decimal form of an exact integer below 2^53: a number argument
-- would be formatted by Redis 7.0 with snprintf('%.17g'), which costs more.
do
  if ttl < 1 then
    ttl = 1
  end
  -- (exact.lua checked a, b, c, ttl and the expiry.)
  -- The key expires at now + ttl on the effective clock, which is
  -- ttl + (now - serverNow) ms from Redis's: the same instant for every
  -- write of one window (fixed window: windowEnd + grace; sliding window:
  -- the next window's end + grace), whatever the clock rule did to now.
  local px = ttl + now - serverNow
  local ls
  if now ~= serverNow then
    ls = format('%d', now)
  else
    if not nowS then
      nowS = format('%d', now)
    end
    ls = nowS
  end
  -- A token bucket's b is now; a window's count is 1 after its first
  -- request of cost 1.
  local bs = ls
  if b == 1 then
    bs = '1'
  elseif b ~= now then
    bs = format('%d', b)
  end
  if alg == 'sliding_log' then
    -- The log changes with every write: every field but the policy's.
    if fresh then
      redis.call('HSET', key, 'schema', SCHEMA, 'alg', alg, 'policy', policy, 'rev', format('%d', rev),
        'last', ls, 'a', format('%d', a), 'b', bs, 'c', format('%d', c), 'l', l)
    else
      redis.call('HSET', key, 'last', ls, 'a', format('%d', a), 'b', bs, 'c', format('%d', c), 'l', l)
    end
  elseif fresh then
    -- c is often 0 (always for a fixed window), rev often 1.
    local cs, rs = '0', '1'
    if c ~= 0 then
      cs = format('%d', c)
    end
    if rev ~= 1 then
      rs = format('%d', rev)
    end
    redis.call('HSET', key, 'schema', SCHEMA, 'alg', alg, 'policy', policy, 'rev', rs,
      'last', ls, 'a', format('%d', a), 'b', bs, 'c', cs)
  elseif a ~= hashA then
    if c ~= hashC then
      redis.call('HSET', key, 'last', ls, 'a', format('%d', a), 'b', bs, 'c', format('%d', c))
    else
      redis.call('HSET', key, 'last', ls, 'a', format('%d', a), 'b', bs)
    end
  elseif c ~= hashC then
    redis.call('HSET', key, 'last', ls, 'b', bs, 'c', format('%d', c))
  else
    redis.call('HSET', key, 'last', ls, 'b', bs)
  end
  -- So a window's hash that this window already wrote (a, the window id,
  -- unchanged) has that expiry already: no PEXPIRE. Any other algorithm's
  -- expiry (the token bucket's) moves with every write.
  if fresh or a ~= hashA or (alg ~= 'fixed_window' and alg ~= 'sliding_window') then
    redis.call('PEXPIRE', key, format('%d', px))
  end
end
-- End of store.lua.
