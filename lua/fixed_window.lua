-- Fixed window, as assembly/algorithms/fixed-window.ts: epoch-aligned windows, w0 = count of last's window.
ALG[2] = function(L, P, B, exists, w0, w1, last, c, t)
  local k, count = fwRoll(P, exists, w0, last, t)
  local untilEnd = (k + 1) * P - t
  -- a count merged from several instances (sync mode) may pass L: nothing is left, not less than nothing
  local room = L - count
  if room < 0 then room = 0 end
  if c > L then return NEVER, room, untilEnd, -1, w0, w1 end
  if c <= room then return ALLOW, room - c, untilEnd, 0, count + c, 0 end
  return DENY, room, untilEnd, untilEnd, w0, w1
end
