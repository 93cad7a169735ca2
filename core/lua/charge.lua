-- fragment charge: the reply of a multi-bucket call, whose first at
-- entries are set. On a denial it carries each bucket's balance and is
-- returned; else every bucket is charged its cost (one SET ... PX each,
-- none for a cost of 0), the reply carries each state written, and the
-- binding bucket (reply[3]) is the one left with the fewest tokens (ties:
-- the one slowest to refill to full).
if reason ~= 0 then
  for i = 1, n do reply[at + i] = fmt('%.17g', toks[i]) end
  return reply
end
local best, bestReset = nil, nil
for i = 1, n do
  local cost = costs[i]
  local left = toks[i] - cost
  local state = fmt('%.17g %s', left, stamps[i])
  if cost > 0 then
    redis.call('SET', KEYS[i], state, 'PX', ARGV[w * i - w + 5])
  end
  reply[at + i] = state
  local reset = (caps[i] - left) / rates[i]
  if best == nil or left < best or (left == best and reset > bestReset) then
    best, bestReset, binding = left, reset, i
  end
end
reply[3] = binding
