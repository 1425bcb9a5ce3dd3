-- Sliding window counter, as assembly/algorithms/sliding-window.ts: prev·(P − e) + cur·P against L·P.
local function swRemaining(L, P, cur, weighted)
  local room = (L - cur) * P
  if room > weighted then return fdiv(room - weighted, P) end
  return 0
end

local function swReset(P, k, t, prev, cur)
  if cur > 0 then return (k + 2) * P - t end
  if prev > 0 then return (k + 1) * P - t end
  return 0
end

local function swRetry(P, L, e, prev, cur, c)
  local toEdge = P - e
  if c <= L - cur then return toEdge - fdiv((L - cur - c) * P, prev) end
  local q = fdiv((L - c) * P, cur)
  if q >= P then return toEdge end
  return toEdge + P - q
end

ALG[3] = function(L, P, B, exists, w0, w1, last, c, t)
  local k, prev, cur = swRoll(P, exists, w0, w1, last, t)
  local e = t - k * P
  local weighted = prev * (P - e)
  if c > L then return NEVER, swRemaining(L, P, cur, weighted), swReset(P, k, t, prev, cur), -1, w0, w1 end
  local avail = L - cur
  if c <= avail and weighted <= (avail - c) * P then
    return ALLOW, swRemaining(L, P, cur + c, weighted), swReset(P, k, t, prev, cur + c), 0, prev, cur + c
  end
  return DENY, swRemaining(L, P, cur, weighted), swReset(P, k, t, prev, cur), swRetry(P, L, e, prev, cur, c), w0, w1
end
