-- tollgate settle, v3. Settles a reservation: a request admitted with an
-- estimated cost (charged by the token-bucket or concurrency script) whose
-- actual cost is now known. Every bucket of the request is refilled to now
-- and charged its difference, actual - estimate, in one call: atomic with
-- the request's other buckets, as its admission was. A reservation is
-- settled once: the call marks it settled, with its reply, and a later call
-- for it (a retry after a lost reply, a report delivered twice) changes
-- nothing and answers the first call's reply.
--
-- KEYS[i]     bucket key i (1 <= i <= n), as the token-bucket script's; every
--             key carries the same hash tag (the tenant).
-- KEYS[n+1]   the reservation's mark, with the same hash tag.
-- ARGV[1]     now, integer microseconds, or "" to read the server clock.
-- ARGV[4i-2]  capacity C_i of bucket i, an integer > 0 (its quota now).
-- ARGV[4i-1]  refill rate r_i of bucket i, tokens per second, a decimal > 0.
-- ARGV[4i]    delta d_i = charged - estimate for bucket i, an integer (may
--             be negative: a refund).
-- ARGV[4i+1]  the debt cap D_i of bucket i, an integer >= 0; 0: no cap.
-- ARGV[4n+2]  how long the mark lives, integer milliseconds > 0: as long as
--             the reservation may still be settled.
--
-- A refund (d_i < 0) never lifts a balance above its capacity. A charge
-- (d_i > 0) may take it below zero, a debt the tenant repays at the refill
-- rate while the token-bucket script denies it (a balance below the cost).
-- Without a cap the debt is carried in full, down to the storage floor:
-- 400 days of refill (r_i x 34,560,000), and never below -2^50, where the
-- arithmetic stays exact; with a cap, down to -D_i (or the storage floor,
-- when higher). What lies beyond the floor is forgiven, and the reply says
-- how much. The stored value keeps the token-bucket script's form and
-- garbage rule (a balance above C_i, below -2^50 or not a number is a full
-- bucket), so the scripts read each other's writes. The TTL is the time to
-- refill to full plus a second: the key never expires while in debt, and
-- lives at most 800 days and a second (C_i / r_i is at most 400 days).
--
-- Reply: {forgiven_1, ..., forgiven_n, state_1, ..., state_n}: forgiven_i
-- the integer tokens of the charge bucket i could not take (0 unless a
-- floor was reached), state_i the value written, "<tokens> <last>"; for a
-- reservation already settled, the reply its first settle gave.

local n = #KEYS - 1
local mark = KEYS[n + 1]
local done = redis.call('GET', mark)
if done then
  return cjson.decode(done)
end
local fmt, find, sub, ceil = string.format, string.find, string.sub, math.ceil
-- #include clock
local deepest = 1125899906842624 -- 2^50

local reply = {}
for i = 1, n do
  local cap = tonumber(ARGV[4 * i - 2])
  local rate = tonumber(ARGV[4 * i - 1])
  local delta = tonumber(ARGV[4 * i])
  local limit = tonumber(ARGV[4 * i + 1])
  local floor = rate * 34560000
  if floor > deepest then floor = deepest end
  if limit > 0 and limit < floor then floor = limit end
  local key = KEYS[i]
  -- #include refill
  local left, forgiven = tokens - delta, 0
  if left > cap then left = cap end
  if left < -floor and delta > 0 then
    -- only a charge is forgiven: a balance already below a (new, lower)
    -- cap keeps its debt
    local f = tokens > -floor and -floor or tokens
    forgiven = ceil(f - left)
    left = f
  end
  local state = fmt('%.17g %s', left, ls)
  redis.call('SET', KEYS[i], state, 'PX', fmt('%d', ceil((cap - left) / rate * 1000) + 1000))
  reply[i] = forgiven
  reply[n + i] = state
end
redis.call('SET', mark, cjson.encode(reply), 'PX', ARGV[4 * n + 2])
return reply
