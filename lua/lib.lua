-- Shared by every algorithm. Lua numbers are doubles: integers are exact up to 2^53, so the loader admits a
-- Redis-backed policy only if B·P (buckets) or L·P (windows) is at most 2^51, which keeps every sum and
-- product below 2^53. Divisions are fixed up after the float divide, which may round across an integer.
local ALLOW, DENY, NEVER = 0, 1, 2

local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end

local function cdiv(a, b)
  local q = fdiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end

local ALG = {}
