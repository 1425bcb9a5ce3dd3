-- Fixed window, as assembly/algorithms/fixed-window.ts: epoch-aligned windows, w0 = count of last's window.
ALG[2] = function(L, P, B, exists, w0, w1, last, c, t)
  local k, count = fwRoll(P, exists, w0, last, t)
  local untilEnd = (k + 1) * P - t
  if c > L then return NEVER, L - count, untilEnd, -1, w0, w1 end
  if c <= L - count then return ALLOW, L - count - c, untilEnd, 0, count + c, 0 end
  return DENY, L - count, untilEnd, untilEnd, w0, w1
end
