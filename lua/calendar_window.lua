-- Calendar window, as assembly/algorithms/calendar-window.ts: w0 = count, w1 = the end (Unix ms) of the
-- window the count belongs to. The caller computes the bounds (src/util/calendar.ts) at its own clock and
-- passes them in the leg's P and B slots: P = the end of the window holding the caller's time, B = the end of
-- the one after it. Redis's clock decides which window a check falls in: a stored count holds while t < w1;
-- else the window is the caller's (t < P) or the next one (t < B: Redis's clock ahead of the caller's across
-- a boundary). A t past both cannot be placed (clocks apart by more than a window): the check is UNREADABLE
-- and takes the policy's failure rule.
ALG[4] = function(L, P, B, exists, w0, w1, last, c, t)
  local count, stop = 0, P
  if exists and t < w1 then
    count, stop = w0, w1
  elseif t >= P then
    if t >= B then return UNREADABLE, 0, 0, 0, w0, w1 end
    stop = B
  end
  local untilEnd = stop - t
  local room = L - count
  if room < 0 then room = 0 end
  if c > L then return NEVER, room, untilEnd, -1, w0, w1 end
  if c <= room then return ALLOW, room - c, untilEnd, 0, count + c, stop end
  return DENY, room, untilEnd, untilEnd, w0, w1
end
