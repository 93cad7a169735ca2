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
--             "" (empty): each bucket has its own cost, the fourth argument
--             of its group (a request whose classes cost differently).
-- ARGV[3i]    capacity C_i of bucket i, an integer > 0.
-- ARGV[3i+1]  refill rate of bucket i, tokens per second, a decimal > 0.
-- ARGV[3i+2]  TTL of bucket i in milliseconds, a positive integer, already
--             formatted by the caller (the server's own number formatting
--             differs between versions: 1e+08 breaks PX).
-- With per-bucket costs (ARGV[2] == "") each group has four arguments:
-- bucket i's are ARGV[4i-1] capacity, ARGV[4i] rate, ARGV[4i+1] TTL and
-- ARGV[4i+2] its cost k_i, an integer >= 0 (0: that bucket is checked and
-- not written). All-or-nothing as with one cost: every bucket must hold its
-- own k_i, and then every bucket is charged its k_i.
--
-- Storage: one string per bucket, "<tokens> <last>", where tokens is the
-- balance after the last charge (%.17g, exact round trip) and last is the
-- time of that charge in integer microseconds (the clock's own digits: TIME's
-- seconds and zero-padded microseconds, or ARGV[1], never reformatted). SET ... PX writes value and
-- TTL in one command. A denial writes nothing: the stored pair still
-- describes the bucket exactly (refill is computed from last, and nothing
-- was consumed). A stored value the script would never write (not two
-- numbers, or tokens outside [-2^50, capacity], or a stamp outside
-- [0, 2^53): Lua's tonumber accepts "nan" and "inf") is treated as a full
-- bucket and rewritten by the next charge, so garbage neither admits nor
-- denies forever. A balance below zero is a debt the settle script wrote
-- (docs/semantics.md, "Reserve, then settle"), as deep as it left it (it
-- never writes one below -2^50): it admits less than a full bucket, and
-- refills from below zero like any balance.
--
-- Reply. Lua numbers are truncated on return, so balances are strings, and
-- the reply carries only what the caller cannot work out itself: it knows
-- the cost, capacities and rates, so it computes "cost exceeds capacity"
-- and the retry time, (cost - tokens_b) / rate_b for the binding bucket b,
-- with the same IEEE arithmetic the script would use.
--   One bucket: a string. With a space it is an admission (or a peek) and
--   is the bucket's state after the call, "<tokens> <last>" (the value just
--   written); without one it is a denial and is the balance, %.17g.
--   n buckets: {allowed (1 or 0), reason (0 ok, 1 over limit, 2 cost exceeds
--   capacity), binding (1-based), tokens_1, ..., tokens_n}, each tokens_i a
--   balance after the call, %.17g, possibly followed by a space and the
--   stamp (readers take the number before the first space).
--
-- Cost: server CPU per call, and the instructions callgrind counts inside
-- EVALSHA, are what docs/benchmarks.md compares with a script that only does
-- GET, TIME and SET PX. The common case, one bucket, has a path of its own
-- without tables, formats one number per call (the balance; the stamp is the
-- clock's own digits) into the one string it writes and replies; a whole
-- balance takes %d, which prints the same digits as %.17g for less.
-- Both paths compute the same numbers. The elapsed time is clamped at >= 0
-- and the stored time never moves backwards, so a clock step back neither
-- mints nor burns tokens.

local n = #KEYS
local fmt, find, sub = string.format, string.find, string.sub
-- #include clock
-- '1' is the common cost: no strtod. "" (per-bucket costs) reads bucket 1's
-- own, which is the one bucket's on the path below
local cost = ARGV[2] == '1' and 1 or tonumber(ARGV[2]) or tonumber(ARGV[6])

if n == 1 then
  local key = KEYS[1]
  local cap, rate = tonumber(ARGV[3]), tonumber(ARGV[4])
  -- #include refill
  if cost > cap or tokens < cost then
    return fmt('%.17g', tokens)
  end
  local left, state = tokens - cost, nil
  if left > 0 and left < 1e15 and left % 1 == 0 then
    state = fmt('%d %s', left, ls) -- %.17g's digits, without float formatting
  else
    state = fmt('%.17g %s', left, ls)
  end
  if cost > 0 then
    redis.call('SET', key, state, 'PX', ARGV[5])
  end
  return state
end

local caps, rates, toks, stamps, costs = {}, {}, {}, {}, {}
local reason, binding, retry = 0, 1, 0
-- w: the arguments per bucket, 4 with per-bucket costs
local mixed = ARGV[2] == ''
local w = mixed and 4 or 3

for i = 1, n do
  local base = w * i - w + 3
  local cap = tonumber(ARGV[base])
  local rate = tonumber(ARGV[base + 1])
  local cost = mixed and tonumber(ARGV[base + 3]) or cost
  caps[i], rates[i], costs[i] = cap, rate, cost
  local key = KEYS[i]
  -- #include refill
  -- #include judge
end

local reply, at = {reason == 0 and 1 or 0, reason, binding}, 3
-- #include charge
return reply
