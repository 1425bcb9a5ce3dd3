-- Token bucket, as assembly/algorithms/token-bucket.ts: x = tokens·P, refill elapsed·L, capped at B·P.
-- Returns code, remaining, resetAfterMs, retryAfterMs, new w0, new w1.
ALG[0] = function(L, P, B, exists, w0, w1, last, c, t)
  local BP = B * P
  local x = BP
  if exists then
    local elapsed = t - last
    if elapsed >= cdiv(BP, L) then x = BP else
      x = w0 + elapsed * L
      if x > BP then x = BP end
    end
  end
  if c > B then return NEVER, fdiv(x, P), cdiv(BP - x, L), -1, w0, w1 end
  local cP = c * P
  if cP <= x then
    local after = x - cP
    return ALLOW, fdiv(after, P), cdiv(BP - after, L), 0, after, 0
  end
  return DENY, fdiv(x, P), cdiv(BP - x, L), cdiv(cP - x, L), w0, w1
end
