-- GCRA, as assembly/algorithms/gcra.ts: TAT = w0 + w1/L (whole ms plus a fraction), debt = (TAT − t)·L.
-- D (onLimit: delay), as token_bucket.lua: a check due within D ms is admitted now, its TAT past t + B·P/L.
ALG[1] = function(L, P, B, exists, w0, w1, last, c, t, D)
  local BP = B * P
  local debt = 0
  if exists and w0 >= t then debt = (w0 - t) * L + w1 end
  local left = 0
  if debt < BP then left = fdiv(BP - debt, P) end
  if c > B then return NEVER, left, cdiv(debt, L), -1, w0, w1 end
  local cP = c * P
  if c == 0 or debt + cP <= BP then
    local nd = debt + cP
    local whole = fdiv(nd, L)
    local rem = 0
    if nd < BP then rem = fdiv(BP - nd, P) end -- a peek past B·P of debt (onLimit: delay) has nothing left
    return ALLOW, rem, cdiv(nd, L), 0, t + whole, nd - whole * L
  end
  local wait = cdiv(debt + cP - BP, L)
  if D and wait <= D then
    local nd = debt + cP
    local whole = fdiv(nd, L)
    return ALLOW, 0, cdiv(nd, L), wait, t + whole, nd - whole * L
  end
  if D and D > 0 then wait = wait - D end
  return DENY, left, cdiv(debt, L), wait, w0, w1
end
