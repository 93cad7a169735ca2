-- tollgate token bucket, v1. Checks and charges one or more buckets of one
-- tenant atomically: either every bucket has enough tokens and all are
-- charged, or none is.
--
-- KEYS[i]     bucket key i (1 <= i <= n). Every key must carry the same hash
--             tag (the tenant) so that the script runs on one Cluster slot.
-- ARGV[1]     now, integer microseconds since the Unix epoch, or "" to read
--             the server clock with TIME (the default; client-clock mode is
--             for managed Redis that forbids TIME in scripts).
-- ARGV[2]     cost k, an integer >= 0. k = 0 is a peek: nothing is written.
-- ARGV[3i]    capacity C_i of bucket i, an integer > 0.
-- ARGV[3i+1]  refill rate of bucket i, tokens per second, a decimal > 0.
-- ARGV[3i+2]  TTL of bucket i in milliseconds, a positive integer, already
--             formatted by the caller (the server's own number formatting
--             differs between versions: 1e+08 breaks PX).
--
-- Storage: one string per bucket, "<tokens> <last>", where tokens is the
-- balance after the last charge (%.17g, exact round trip) and last is the
-- time of that charge in integer microseconds. SET ... PX writes value and
-- TTL in one command. A denial writes nothing: the stored pair still
-- describes the bucket exactly (refill is computed from last, and nothing
-- was consumed). A stored value the script would never write (not two
-- numbers, or tokens outside [0, capacity], or a stamp outside [0, 2^53):
-- Lua's tonumber accepts "nan" and "inf") is treated as a full bucket and
-- rewritten by the next charge, so garbage neither admits nor denies forever.
--
-- Reply (fractions are strings: Lua numbers are truncated on return):
--   [1] allowed        1 or 0
--   [2] reason         0 ok, 1 over limit, 2 cost exceeds capacity (never)
--   [3] binding        index of the binding bucket (1-based)
--   [4] retry_after    seconds until the request could be admitted ("0" when
--                      allowed or never), %.17g
--   [5..4+n] tokens_i  balance of bucket i after this call, %.17g, possibly
--                      followed by a space and more text (the single-bucket
--                      path replies the stored value itself, which saves a
--                      format): readers take the number before the first
--                      space.
--
-- Cost: one bucket is the common case and has a path of its own without
-- tables (server CPU per call ~20% lower, measured with redis-benchmark
-- -P 16; see docs/benchmarks.md). Both paths compute the same numbers.
-- The elapsed time is clamped at >= 0 and the stored time never moves
-- backwards, so a clock step back neither mints nor burns tokens.

local n = #KEYS
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local cost = tonumber(ARGV[2])
local fmt = string.format

if n == 1 then
  local key = KEYS[1]
  local cap = tonumber(ARGV[3])
  local rate = tonumber(ARGV[4])
  local tokens, last = cap, now
  local v = redis.call('GET', key)
  if v then
    local sep = string.find(v, ' ', 1, true)
    if sep then
      local t, l = tonumber(string.sub(v, 1, sep - 1)), tonumber(string.sub(v, sep + 1))
      if t and l and t >= 0 and t <= cap and l >= 0 and l < 9007199254740992 then
        tokens, last = t, l
      end
    end
  end
  local elapsed = now - last
  if elapsed > 0 then
    tokens = tokens + elapsed * rate / 1000000
    last = now
  end
  if tokens > cap then tokens = cap end
  if cost > cap then
    return {0, 2, 1, '0', fmt('%.17g', tokens)}
  elseif tokens < cost then
    return {0, 1, 1, fmt('%.17g', (cost - tokens) / rate), fmt('%.17g', tokens)}
  end
  local state = fmt('%.17g %.0f', tokens - cost, last)
  if cost > 0 then
    redis.call('SET', key, state, 'PX', ARGV[5])
  end
  return {1, 0, 1, '0', state}
end

local caps, rates, ttls, toks, lasts = {}, {}, {}, {}, {}
local reason, binding, retry = 0, 1, 0

for i = 1, n do
  local base = 3 * i
  local cap = tonumber(ARGV[base])
  local rate = tonumber(ARGV[base + 1])
  caps[i], rates[i], ttls[i] = cap, rate, ARGV[base + 2]
  local tokens, last = cap, now
  local v = redis.call('GET', KEYS[i])
  if v then
    local sep = string.find(v, ' ', 1, true)
    if sep then
      local t, l = tonumber(string.sub(v, 1, sep - 1)), tonumber(string.sub(v, sep + 1))
      if t and l and t >= 0 and t <= cap and l >= 0 and l < 9007199254740992 then
        tokens, last = t, l
      end
    end
  end
  local elapsed = now - last
  if elapsed > 0 then
    tokens = tokens + elapsed * rate / 1000000
    last = now
  end
  -- elapsed <= 0 is a clock step backwards: no refill, and the later stamp
  -- is kept so that the step is not counted again when the clock recovers
  if tokens > cap then tokens = cap end
  toks[i], lasts[i] = tokens, last

  if cost > cap then
    if reason ~= 2 then reason, binding, retry = 2, i, 0 end
  elseif tokens < cost and reason ~= 2 then
    local wait = (cost - tokens) / rate
    if reason == 0 or wait > retry then binding, retry = i, wait end
    reason = 1
  end
end

if reason == 0 then
  -- every bucket admits: charge all; the binding bucket is the one left with
  -- the fewest tokens (ties: the one slowest to refill to full)
  local best, bestReset = nil, nil
  for i = 1, n do
    local left = toks[i] - cost
    toks[i] = left
    if cost > 0 then
      redis.call('SET', KEYS[i], fmt('%.17g %.0f', left, lasts[i]), 'PX', ttls[i])
    end
    local reset = (caps[i] - left) / rates[i]
    if best == nil or left < best or (left == best and reset > bestReset) then
      best, bestReset, binding = left, reset, i
    end
  end
end

local reply = {reason == 0 and 1 or 0, reason, binding, fmt('%.17g', retry)}
for i = 1, n do reply[4 + i] = fmt('%.17g', toks[i]) end
return reply
