-- Shared by every algorithm. Lua numbers are doubles: integers are exact up to 2^53, so the loader admits a
-- Redis-backed policy only if B·P (buckets) or L·P (windows) is at most 2^51, which keeps every sum and
-- product below 2^53. Divisions are fixed up after the float divide, which may round across an integer.
local ALLOW, DENY, NEVER = 0, 1, 2
-- a leg whose stored state cannot be read (a key of another type, or a malformed value, under our prefix)
local UNREADABLE = 4

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

-- The time of a script run, in Unix ms: Redis's TIME when ARGV[1] is '1' (strict: one clock for every
-- instance), else ARGV[2], the caller's clock.
local function clockMs()
  if ARGV[1] == '1' then
    local tm = redis.call('TIME')
    return tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
  end
  return tonumber(ARGV[2])
end

-- A sliding window's counts as of time t: k = t's window, prev = count of window k − 1, cur = of window k.
local function swRoll(P, exists, w0, w1, last, t)
  local k = fdiv(t, P)
  local prev, cur = 0, 0
  if exists then
    local lk = fdiv(last, P)
    if lk == k then prev, cur = w0, w1 elseif lk + 1 == k then prev = w1 end
  end
  return k, prev, cur
end

local ALG = {}
