-- tollgate settle, v1. Settles a reservation: a request admitted with an
-- estimated cost (charged by the token-bucket or concurrency script) whose
-- actual cost is now known. Every bucket of the request is refilled to now
-- and charged the difference, actual - estimate, in one call: atomic with
-- the request's other buckets, as its admission was.
--
-- KEYS[i]     bucket key i (1 <= i <= n), as the token-bucket script's; every
--             key carries the same hash tag (the tenant).
-- ARGV[1]     now, integer microseconds, or "" to read the server clock.
-- ARGV[2]     delta d = actual - estimate, an integer (may be negative: a
--             refund).
-- ARGV[2i+1]  capacity C_i of bucket i, an integer > 0.
-- ARGV[2i+2]  refill rate of bucket i, tokens per second, a decimal > 0.
--
-- A refund (d < 0) never lifts a balance above its capacity. A charge
-- (d > 0) may take it below zero, a debt the tenant repays at the refill
-- rate while the token-bucket script denies it (a balance below the cost),
-- down to -C_i at most: what lies beyond one capacity of debt is forgiven
-- (the reply says how much). The stored value keeps the token-bucket
-- script's form and garbage rule (a balance outside [-C_i, C_i] is a full
-- bucket), so the two scripts read each other's writes. The TTL is the time
-- to refill to full plus a second: the key never expires while in debt.
--
-- Reply: {forgiven_1, ..., forgiven_n, state_1, ..., state_n}: forgiven_i
-- the integer tokens of the charge bucket i could not take (0 unless the
-- floor was reached), state_i the value written, "<tokens> <last>".

local n = #KEYS
local fmt, find, sub, ceil = string.format, string.find, string.sub, math.ceil
local stamp, now = ARGV[1], nil
if stamp == '' then
  local t = redis.call('TIME')
  local sec, us = t[1], t[2]
  now = sec * 1000000 + us
  if #us < 6 then us = sub('00000' .. us, -6) end
  stamp = sec .. us
else
  now = tonumber(stamp)
end
local delta = tonumber(ARGV[2])

local reply = {}
for i = 1, n do
  local cap = tonumber(ARGV[2 * i + 1])
  local rate = tonumber(ARGV[2 * i + 2])
  local tokens, last, ls = cap, now, stamp
  local v = redis.call('GET', KEYS[i])
  if v then
    local sep = find(v, ' ', 1, true)
    if sep then
      local s = sub(v, sep + 1)
      local t, l = tonumber(sub(v, 1, sep - 1)), tonumber(s)
      if t and l and t >= -cap and t <= cap and l >= 0 and l < 9007199254740992 then
        tokens, last, ls = t, l, s
      end
    end
  end
  if now > last then
    tokens = tokens + (now - last) * rate / 1000000
    if tokens > cap then tokens = cap end
    ls = stamp
  end
  local left, forgiven = tokens - delta, 0
  if left > cap then left = cap end
  if left < -cap then
    forgiven = ceil(-cap - left)
    left = -cap
  end
  local state = fmt('%.17g %s', left, ls)
  redis.call('SET', KEYS[i], state, 'PX', fmt('%d', ceil((cap - left) / rate * 1000) + 1000))
  reply[i] = forgiven
  reply[n + i] = state
end
return reply
