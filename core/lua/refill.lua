-- fragment refill: bucket key's balance refilled to now, tokens, and ls,
-- the stamp to store with it. Needs key, cap, rate, now, stamp and the
-- locals find and sub. A stored value the scripts would never write is a
-- full bucket; the stored time never moves backwards.
local tokens, last, ls = cap, now, stamp
local v = redis.call('GET', key)
if v then
  local sep = find(v, ' ', 1, true)
  if sep then
    local s = sub(v, sep + 1)
    local t, l = tonumber(sub(v, 1, sep - 1)), tonumber(s)
    if t and l and t >= -1125899906842624 and t <= cap and l >= 0 and l < 9007199254740992 then
      tokens, last, ls = t, l, s
    end
  end
end
-- now <= last is a clock step backwards: no refill, and the later stamp
-- is kept so that the step is not counted again when the clock recovers
if now > last then
  tokens = tokens + (now - last) * rate / 1000000
  if tokens > cap then tokens = cap end
  ls = stamp
end
