-- tollgate concurrency slots, v1. The token-bucket script's multi-bucket
-- check plus one bucket's concurrency limit, in one call: a request is
-- admitted only when every bucket has its cost in tokens AND a slot is free;
-- then all buckets are charged and the slot is taken. A denial by a bucket
-- takes no slot; a denial for lack of a slot charges no token. Requests of
-- classes without a concurrency limit never run this script (the token
-- bucket script's one-bucket path pays nothing for the feature).
--
-- Slots are leases: a sorted set per tenant and bucket, member = slot id,
-- score = deadline in integer microseconds. A slot counts while its deadline
-- is in the future; an admission first removes the expired ones, so a
-- replica that died without releasing leaks its slots for at most the lease
-- time. Release is a plain ZREM by the holder; renewal is the mode below.
--
-- Acquire (two or more keys):
-- KEYS[i]     bucket key i (1 <= i <= n = #KEYS - 1), as the token-bucket
--             script's.
-- KEYS[n+1]   the slot set. Every key carries the same hash tag (the tenant).
-- ARGV[1]     now, integer microseconds, or "" to read the server clock.
-- ARGV[2]     cost k, an integer >= 0. k = 0 is a peek: nothing is written
--             and no slot is taken. "" (empty): each bucket has its own
--             cost, the fourth argument of its group, as the token-bucket
--             script's; a peek then is every cost 0.
-- ARGV[3i], ARGV[3i+1], ARGV[3i+2]  capacity, refill rate and TTL (ms) of
--             bucket i, as the token-bucket script's (w = 3 arguments per
--             bucket; with per-bucket costs w = 4: ARGV[4i-1] capacity,
--             ARGV[4i] rate, ARGV[4i+1] TTL, ARGV[4i+2] cost k_i).
-- ARGV[wn+3]  the concurrency limit N, an integer > 0.
-- ARGV[wn+4]  the lease, integer microseconds > 0.
-- ARGV[wn+5]  the slot id, unique to this request.
-- ARGV[wn+6]  the slot set's TTL in ms (the lease plus a margin): the key is
--             never left to expire before its latest deadline.
-- Reply: {allowed (1 or 0), reason (0 ok, 1 over limit, 2 cost exceeds
-- capacity, 3 no free slot), binding (1-based bucket), held (slots in use
-- after the call), wait (reason 3: microseconds until the earliest
-- deadline; else 0), tokens_1, ..., tokens_n} with the balances as the
-- token-bucket script's multi-bucket reply.
--
-- Renew (one key, the slot set): ARGV[1] now as above, ARGV[2] the slot id,
-- ARGV[3] the lease in microseconds, ARGV[4] the set's TTL in ms. Moves the
-- slot's deadline to now + lease and replies 1, or replies 0 when the slot
-- is gone (released, reset, or past its deadline: then it no longer counted
-- and another request may hold its place, so it is removed, not revived).
--
-- Forget (one key, the slot set; ARGV[1] to ARGV[4] as Renew's, ARGV[5]
-- "forget"): the check that sent the slot id was not answered to its caller
-- (timed out, abandoned): whether or not its acquire has run, it must hold
-- no slot. A slot it took is removed (reply 1 while it still counted, else
-- 0); when its acquire has not run (or never will), a tombstone is left in
-- its place, member = the id, score = -(now + lease): it never counts (a
-- negative score is never ahead of now), and an acquire that finds its own
-- id in the set takes no slot and charges nothing (reason 3). The
-- tombstone is removed with the expired slots once its score's deadline has
-- passed, so an acquire run more than a lease after its forget is not
-- stopped: that slot expires a lease after it was taken, as any slot whose
-- holder is gone.

-- Free (one key, the slot set; ARGV[1] to ARGV[4] as Renew's, ARGV[5]
-- "free", ARGV[6] a group's id prefix or ""): frees one slot for a caller
-- that sees a request's start and end as two calls, possibly to different
-- processes (a gateway's hit and negative hit). The slot ARGV[2] ("" for
-- none) is removed while it still counts; else, with a prefix, the live
-- slot whose id starts with it and whose deadline is the earliest (at most
-- N live slots are read). Replies 1 when a slot was removed, else 0. Its
-- holder, if another process, finds it gone at its next renewal.

-- A number handed to redis.call is formatted with 14 digits: deadlines
-- (16 digits) are formatted here.

local nk = #KEYS
local fmt, find, sub = string.format, string.find, string.sub
-- #include clock

-- keep the set's TTL at least ttl ms: never shorten it below another
-- holder's deadline (replicas may be configured with different leases)
local function extend(skey, ttl)
  if redis.call('PTTL', skey) < tonumber(ttl) then
    redis.call('PEXPIRE', skey, ttl)
  end
end

if nk == 1 then
  local skey, id = KEYS[1], ARGV[2]
  if ARGV[5] == 'free' then
    -- the slot id when it still counts, else the live slot of group
    -- ARGV[6] (an id prefix, "" for none) with the earliest deadline
    local score = id ~= '' and redis.call('ZSCORE', skey, id)
    if score and tonumber(score) > now then
      redis.call('ZREM', skey, id)
      return 1
    end
    local p = ARGV[6]
    if p == '' then return 0 end
    local live = redis.call('ZRANGEBYSCORE', skey, '(' .. stamp, '+inf')
    for _, m in ipairs(live) do
      if sub(m, 1, #p) == p then
        redis.call('ZREM', skey, m)
        return 1
      end
    end
    return 0
  end
  local score = redis.call('ZSCORE', skey, id)
  if ARGV[5] == 'forget' then
    -- a live or expired slot has a positive score, a tombstone a negative one
    if score and tonumber(score) > 0 then
      redis.call('ZREM', skey, id)
      if tonumber(score) > now then return 1 end
      return 0
    end
    redis.call('ZADD', skey, fmt('%.17g', -(now + tonumber(ARGV[3]))), id)
    extend(skey, ARGV[4])
    return 0
  end
  if not score then return 0 end
  if tonumber(score) <= now then
    redis.call('ZREM', skey, id)
    return 0
  end
  redis.call('ZADD', skey, 'XX', fmt('%.17g', now + tonumber(ARGV[3])), id)
  extend(skey, ARGV[4])
  return 1
end

local n = nk - 1
local skey = KEYS[nk]
-- w: the arguments per bucket, 4 with per-bucket costs; spend is the
-- largest cost (0: a peek)
local mixed = ARGV[2] == ''
local w = mixed and 4 or 3
local a = w * n + 3
local limit = tonumber(ARGV[a])
local cost = tonumber(ARGV[2])
local spend = cost or 0
local live = '(' .. stamp
local held = redis.call('ZCOUNT', skey, live, '+inf')

local caps, rates, toks, stamps, costs = {}, {}, {}, {}, {}
local reason, binding, retry = 0, 1, 0

for i = 1, n do
  local base = w * i - w + 3
  local cap = tonumber(ARGV[base])
  local rate = tonumber(ARGV[base + 1])
  local cost = cost
  if mixed then
    cost = tonumber(ARGV[base + 3])
    if cost > spend then spend = cost end
  end
  caps[i], rates[i], costs[i] = cap, rate, cost
  local key = KEYS[i]
  -- #include refill
  -- #include judge
end

-- the request's own id already in the set is its forget's tombstone: the
-- caller is gone, nothing is taken
local wait = 0
if reason == 0 and spend > 0 and (held >= limit or redis.call('ZSCORE', skey, ARGV[a + 2])) then
  reason = 3
  local first = redis.call('ZRANGEBYSCORE', skey, live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if first[2] then wait = tonumber(first[2]) - now end
end

local reply, at = {reason == 0 and 1 or 0, reason, binding, held, wait}, 5
-- #include charge
if spend > 0 then
  -- expired slots are removed only when there are some (ZCARD is O(1));
  -- a new set gets its TTL without reading one
  local all = held > 0 and redis.call('ZCARD', skey) or 0
  if all > held or (held == 0 and redis.call('EXISTS', skey) == 1) then
    -- the expired slots (scores up to now) and tombstones (down to -now)
    redis.call('ZREMRANGEBYSCORE', skey, '-' .. stamp, stamp)
    all = redis.call('ZCARD', skey)
  end
  redis.call('ZADD', skey, fmt('%.17g', now + tonumber(ARGV[a + 1])), ARGV[a + 2])
  if all == 0 then
    redis.call('PEXPIRE', skey, ARGV[a + 3])
  else
    extend(skey, ARGV[a + 3])
  end
  reply[4] = held + 1
end
return reply
