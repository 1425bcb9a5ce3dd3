-- Token bucket, as assembly/algorithms/token-bucket.ts: x = tokens·P, refill elapsed·L, capped at B·P.
-- Returns code, remaining, resetAfterMs, retryAfterMs, new w0, new w1.
-- D (onLimit: delay): the most ms the check may wait: short of tokens but refilled within D ms, it is admitted
-- now in debt (x < 0, at most D·L; the loader keeps B·P + D·L ≤ 2^51) and its wait is returned in the
-- retryAfterMs place; past D it is denied with the earliest retry that is admitted (its wait minus D).
ALG[0] = function(L, P, B, exists, w0, w1, last, c, t, D)
  local BP = B * P
  local x = BP
  if exists then
    -- elapsed·L tokens·P refilled (from a debt, w0 < 0, the bucket takes longer to fill), capped at B·P. Exact in
    -- doubles: below 2^53 every term is; a product past it (a key idle for ages) is still past B·P ≤ 2^51 after
    -- adding w0 (≥ −2^51), so the cap gives B·P, as it would exactly
    x = w0 + (t - last) * L
    if x > BP then x = BP end
  end
  local whole = 0
  if x > 0 then whole = fdiv(x, P) end
  if c > B then return NEVER, whole, cdiv(BP - x, L), -1, w0, w1 end
  local cP = c * P
  if c == 0 or cP <= x then
    local after = x - cP
    if after < 0 then return ALLOW, 0, cdiv(BP - after, L), 0, after, 0 end -- a peek in debt
    return ALLOW, fdiv(after, P), cdiv(BP - after, L), 0, after, 0
  end
  local wait = cdiv(cP - x, L)
  if D and wait <= D then
    local after = x - cP
    return ALLOW, 0, cdiv(BP - after, L), wait, after, 0
  end
  if D and D > 0 then wait = wait - D end
  return DENY, whole, cdiv(BP - x, L), wait, w0, w1
end
