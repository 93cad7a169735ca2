-- fragment judge: bucket i (tokens, after the refill) judged for its cost,
-- its balance and stamp kept for the charge. reason: 0 every bucket so far
-- admits, 1 over limit (binding: the bucket with the longest wait, retry),
-- 2 cost exceeds capacity (binding: the first such bucket; it outranks 1).
toks[i], stamps[i] = tokens, ls
if cost > cap then
  if reason ~= 2 then reason, binding = 2, i end
elseif tokens < cost and reason ~= 2 then
  local wait = (cost - tokens) / rate
  if reason == 0 or wait > retry then binding, retry = i, wait end
  reason = 1
end
