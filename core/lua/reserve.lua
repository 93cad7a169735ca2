-- tollgate reserve, v1. Reserves a request's tokens ahead of time, or
-- cancels such a reservation (core.Limiter.Reserve, Reservation.Cancel).
--
-- A reservation charges every bucket of a request at once, all or nothing
-- as a check does, even when a bucket lacks the tokens: its balance may go
-- below zero, and the caller waits until the refill would have covered the
-- cost: the time to act, T = now + max over the buckets of
-- (cost_i - tokens_i) / rate_i (0 when every bucket holds its cost), in
-- integer microseconds rounded up. When T - now exceeds the caller's max
-- wait, or a cost exceeds its bucket's capacity, nothing is written. Each
-- bucket remembers the latest T of its reservations (its last event), which
-- a cancel needs.
--
-- KEYS[2i-1]  bucket key i (1 <= i <= n), as the token-bucket script's.
-- KEYS[2i]    bucket i's last-event key: the time of act of its latest
--             reservation, integer microseconds, kept while it is ahead.
--             Every key carries the same hash tag (the tenant).
-- ARGV[1]     now, integer microseconds, or "" to read the server clock.
-- ARGV[2]     "r" to reserve, "c" to cancel.
-- ARGV[3]     reserve: the max wait, integer microseconds >= 0.
--             cancel: the reservation's time to act T, integer microseconds.
-- ARGV[3i+1]  capacity C_i of bucket i, an integer > 0.
-- ARGV[3i+2]  refill rate r_i of bucket i, tokens per second, a decimal > 0.
-- ARGV[3i+3]  cost k_i of bucket i, an integer >= 0 (0: judged, not charged).
--
-- Reserve reply: {status, binding, now, at, tokens_1, ..., tokens_n}.
--   status 0: reserved; at is T and tokens_i is the state written,
--     "<tokens> <last>" (the token-bucket script's form).
--   status 1: the wait exceeds the max (or the debt would pass -2^50,
--     which the stored form does not hold); at is the wait, microseconds,
--     and tokens_i the balance, %.17g. Nothing written.
--   status 2: a cost exceeds its capacity (binding names it); at is 0.
--   binding is the bucket that sets the wait (1-based): the one that
--   waits longest, or when none waits, the one left with the fewest tokens.
-- Cancel reply: {restored_1, ..., restored_n}, %.17g: x/time/rate's
--   CancelAt rule, per bucket. Nothing is restored at or after T. Else
--   bucket i gets back k_i - r_i x (last_i - T) (last_i its last event,
--   read as T when within a microsecond of it, the rounding of times;
--   at most k_i, none when not above 0), never above its capacity; and
--   when the cancelled reservation was its last, its last event moves back
--   to T - k_i / r_i, unless that is before now.
--
-- Storage: the bucket keeps the token-bucket script's form and garbage
-- rule, with the settle script's TTL (the time to refill to full plus a
-- second: never expires while in debt). The last-event key lives until a
-- second after its time.

local n = #KEYS / 2
local fmt, find, sub, ceil = string.format, string.find, string.sub, math.ceil
-- #include clock

local function arg(i, j) return tonumber(ARGV[3 * i + j]) end

if ARGV[2] == 'c' then
  local act = tonumber(ARGV[3])
  local reply = {}
  for i = 1, n do reply[i] = '0' end
  if now >= act then return reply end
  for i = 1, n do
    local cap, rate, cost = arg(i, 1), arg(i, 2), arg(i, 3)
    local key, lkey = KEYS[2 * i - 1], KEYS[2 * i]
    local lastEvent = tonumber(redis.call('GET', lkey))
    -- times are whole microseconds, rounded up, and a cancel moves the
    -- last event back by the cost's time, so a last event within a
    -- microsecond of T is T's own
    if not lastEvent or lastEvent <= act + 1 then lastEvent = act end
    local restore = cost - rate * (lastEvent - act) / 1000000
    if restore > cost then restore = cost end
    if restore > 0 then
      -- #include refill
      local left = tokens + restore
      if left > cap then left = cap end
      redis.call('SET', key, fmt('%.17g %s', left, ls), 'PX', fmt('%d', ceil((cap - left) / rate * 1000) + 1000))
      if lastEvent == act then
        local prev = ceil(act - cost * 1000000 / rate)
        if prev >= now then
          redis.call('SET', lkey, fmt('%d', prev), 'PX', fmt('%d', ceil((prev - now) / 1000) + 1000))
        end
      end
      reply[i] = fmt('%.17g', restore)
    end
  end
  return reply
end

local maxWait = tonumber(ARGV[3])
local toks, stamps, costs, caps, rates = {}, {}, {}, {}, {}
local wait, binding, status = 0, 1, 0
for i = 1, n do
  local cap, rate, cost = arg(i, 1), arg(i, 2), arg(i, 3)
  local key = KEYS[2 * i - 1]
  -- #include refill
  toks[i], stamps[i], costs[i], caps[i], rates[i] = tokens, ls, cost, cap, rate
  if cost > cap then
    if status ~= 2 then status, binding = 2, i end
  elseif status == 0 and cost > tokens then
    local w = ceil((cost - tokens) / rate * 1000000)
    if w > wait then wait, binding = w, i end
  end
end

local reply = {status, binding, stamp, '0'}
if status == 2 then
  for i = 1, n do reply[4 + i] = fmt('%.17g', toks[i]) end
  return reply
end
-- a debt below -2^50 would read back as garbage (a full bucket): refused as
-- too long a wait (only a rate near the quotas' largest reaches it)
for i = 1, n do
  if toks[i] - costs[i] < -1125899906842624 then wait = maxWait + 1 end
end
if wait > maxWait then
  reply[1], reply[4] = 1, fmt('%d', wait)
  for i = 1, n do reply[4 + i] = fmt('%.17g', toks[i]) end
  return reply
end

local act = now + wait
local best = nil
for i = 1, n do
  local left = toks[i] - costs[i]
  local state = fmt('%.17g %s', left, stamps[i])
  if costs[i] > 0 then
    redis.call('SET', KEYS[2 * i - 1], state, 'PX', fmt('%d', ceil((caps[i] - left) / rates[i] * 1000) + 1000))
    local lkey = KEYS[2 * i]
    local lastEvent = tonumber(redis.call('GET', lkey))
    if act > now and (not lastEvent or act > lastEvent) then
      redis.call('SET', lkey, fmt('%d', act), 'PX', fmt('%d', ceil(wait / 1000) + 1000))
    end
  end
  reply[4 + i] = state
  if wait == 0 and (best == nil or left < best) then best, binding = left, i end
end
reply[2] = binding
reply[4] = fmt('%d', act)
return reply
