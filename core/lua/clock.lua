-- fragment clock: now, the call's time in integer microseconds, and stamp,
-- the same as the clock's own digits (TIME's seconds and zero-padded
-- microseconds, or ARGV[1], never reformatted). Needs the local sub.
local stamp, now = ARGV[1], nil
if stamp == '' then
  local t = redis.call('TIME')
  local sec, us = t[1], t[2]
  -- exact (below 2^53), and two short strtods cost less than one of 16 digits
  now = sec * 1000000 + us
  if #us < 6 then us = sub('00000' .. us, -6) end
  stamp = sec .. us
else
  now = tonumber(stamp)
end
