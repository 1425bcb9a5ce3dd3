-- GCRA, as assembly/algorithms/gcra.ts: TAT = w0 + w1/L (whole ms plus a fraction), debt = (TAT − t)·L.
ALG[1] = function(L, P, B, exists, w0, w1, last, c, t)
  local BP = B * P
  local debt = 0
  if exists and w0 >= t then debt = (w0 - t) * L + w1 end
  if c > B then return NEVER, fdiv(BP - debt, P), cdiv(debt, L), -1, w0, w1 end
  local cP = c * P
  if debt + cP <= BP then
    local nd = debt + cP
    local whole = fdiv(nd, L)
    return ALLOW, fdiv(BP - nd, P), cdiv(nd, L), 0, t + whole, nd - whole * L
  end
  return DENY, fdiv(BP - debt, P), cdiv(debt, L), cdiv(debt + cP - BP, L), w0, w1
end
