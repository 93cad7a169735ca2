-- The hash encoding of tokenbucket.lua (HMGET/HSET+PEXPIRE), kept only so
-- that BenchmarkEncoding can compare it with the packed string. Same semantics.
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
-- was consumed).
--
-- Reply (fractions are strings: Lua numbers are truncated on return):
--   [1] allowed        1 or 0
--   [2] reason         0 ok, 1 over limit, 2 cost exceeds capacity (never)
--   [3] binding        index of the binding bucket (1-based)
--   [4] retry_after    seconds until the request could be admitted ("0" when
--                      allowed or never), %.17g
--   [5..4+n] tokens_i  balance of bucket i after this call, %.17g
--
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

local caps, rates, ttls, toks, lasts = {}, {}, {}, {}, {}
local reason, binding, retry = 0, 1, 0
local fmt = string.format

for i = 1, n do
  local base = 3 * i
  local cap = tonumber(ARGV[base])
  local rate = tonumber(ARGV[base + 1])
  caps[i], rates[i], ttls[i] = cap, rate, ARGV[base + 2]
  local tokens, last = cap, now
  local h = redis.call('HMGET', KEYS[i], 'tokens', 'last')
  if h[1] then
    tokens = tonumber(h[1]) or cap
    last = tonumber(h[2]) or now
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
      redis.call('HSET', KEYS[i], 'tokens', fmt('%.17g', left), 'last', fmt('%.0f', lasts[i]))
      redis.call('PEXPIRE', KEYS[i], ttls[i])
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
