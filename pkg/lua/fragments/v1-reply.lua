-- fragments/v1-reply.lua: the v1 single-key programs' reply, shared by the
-- three of them: seven bulk strings.
--
-- dec formats an exact integer; anything else is a program bug and raises.
local function dec(n)
  return format('%d', exact(n))
end

local function reply(status, serverNow, effectiveNow, limit, remaining, retryAfter, resetAt)
  return { status, dec(serverNow), dec(effectiveNow), dec(limit), dec(remaining), dec(retryAfter), dec(resetAt) }
end
-- End of v1-reply.lua.
