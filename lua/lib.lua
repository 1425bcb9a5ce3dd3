-- Shared by every algorithm. Lua numbers are doubles: integers are exact up to 2^53, so the loader admits a
-- Redis-backed policy only if B·P (buckets) or L·P (windows) is at most 2^51, which keeps every sum and
-- product below 2^53. Divisions are fixed up after the float divide, which may round across an integer.
local ALLOW, DENY, NEVER = 0, 1, 2
-- a leg whose stored state cannot be read (a key of another type, or a malformed value, under our prefix)
local UNREADABLE = 4

-- a % b is a − floor(a / b)·b (luai_nummod), exact below 2^53, so (a − a % b) / b is math.floor(a / b)
-- without the call (math.floor costs a C call and a global lookup per division).
local function fdiv(a, b)
  local r = a % b
  local q = (a - r) / b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end

local function cdiv(a, b)
  local r = a % b
  local q = (a - r) / b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  if q * b < a then q = q + 1 end
  return q
end

-- The time of a script run, in Unix ms: Redis's TIME when ARGV[1] is '1' (strict: one clock for every
-- instance), else ARGV[2], the caller's clock. ARGV is given, not read as a global: the check script also runs
-- as a Redis Function (lua/check.lua), which gets its arguments as parameters.
local function clockMs(ARGV)
  if ARGV[1] == '1' then
    local tm = redis.call('TIME')
    return tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
  end
  return tonumber(ARGV[2])
end

-- tonumber(s), memoized: ARGV strings repeat from leg to leg (one policy's L, P, B; costs of 1), and each
-- tonumber is a strtod.
local NUM = {}
local function num(s)
  local v = NUM[s]
  if v == nil then
    v = tonumber(s)
    NUM[s] = v
  end
  return v
end

-- A key's state (w0, w1, lastSeen), as check.lua and sync.lua store it: three little-endian doubles, 24 bytes
-- (struct.pack '<ddd'). Lua numbers are doubles, so the packing is exact for every value a state can hold,
-- the negative w0 of a sync debt included, and costs Redis far less than formatting and parsing decimal text.
local function encodeState(w0, w1, last)
  return struct.pack('<ddd', w0, w1, last)
end

-- 2^53: integers past it are not exact in a double; no state comes near it (the loader bounds B·P by 2^51).
local MAXN = 9007199254740992

-- w0, w1, lastSeen of a stored value, or nil when it is not a state (a malformed value). A packed state must
-- hold three integers within ±2^53 (w1 and lastSeen ≥ 0): NaN and ±inf fail x % 1 == 0, and text read as
-- doubles is never integral (its high bytes are printable ASCII: magnitudes below 2^-90). The decimal text
-- "w0 w1 lastSeen" of earlier versions is still read, so keys they wrote stay valid until overwritten.
local function decodeState(raw)
  if #raw == 24 then
    local w0, w1, last = struct.unpack('<ddd', raw)
    if w0 % 1 == 0 and w1 % 1 == 0 and last % 1 == 0 and w0 >= -MAXN and w0 <= MAXN
      and w1 >= 0 and w1 <= MAXN and last >= 0 and last <= MAXN then
      return w0, w1, last
    end
  end
  local s0, s1, sl = string.match(raw, '^(-?%d+) (%d+) (%d+)$')
  if s0 then return tonumber(s0), tonumber(s1), tonumber(sl) end
  return nil
end

-- MGET of KEYS[1..n], 512 keys a call (unpack's stack limit): a key that is absent or holds another type
-- reads as false.
local function readAll(KEYS, n)
  if n == 0 then return {} end
  if n <= 512 then return redis.call('MGET', unpack(KEYS, 1, n)) end
  local raw = {}
  local i = 1
  while i <= n do
    local e = i + 511
    if e > n then e = n end
    local part = redis.call('MGET', unpack(KEYS, i, e))
    for j = i, e do raw[j] = part[j - i + 1] end
    i = e + 1
  end
  return raw
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

-- A fixed window's count as of time t: k = t's window, count = of window k (last's count if last is in it).
local function fwRoll(P, exists, w0, last, t)
  local k = fdiv(t, P)
  if exists and fdiv(last, P) == k then return k, w0 end
  return k, 0
end

local ALG = {}

-- struct formats of m ≤ 512 little-endian doubles ('<' and m times 'd'), cut from one string that one
-- concatenation builds on first use: string.rep adds a character at a time (~30 k Redis instructions a call
-- for the reply's and the legs' formats), a concatenation copies blocks.
local D64 = 'dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd'
local FMT512
local function doubles(m)
  if not FMT512 then FMT512 = '<' .. D64 .. D64 .. D64 .. D64 .. D64 .. D64 .. D64 .. D64 end
  if m == 512 then return FMT512 end
  return string.sub(FMT512, 1, m + 1)
end

-- lua/check.lua's ARGV[4]: n legs of 6 little-endian doubles, as one flat table (6 per leg), unpacked 64 legs
-- per struct.unpack call (one C call and one table fill instead of one per leg; 64 legs keep the values on
-- the Lua stack well under its limit).
local function unpackLegs(packed, n)
  if n <= 64 then
    if n == 0 then return {} end
    return { struct.unpack(doubles(6 * n), packed) }
  end
  local t = {}
  local j, pos, f64 = 0, 1, doubles(384)
  while j < n do
    local m = n - j
    local f = f64
    if m > 64 then m = 64 else f = doubles(6 * m) end
    local part = { struct.unpack(f, packed, pos) }
    local base = j * 6
    for k = 1, 6 * m do t[base + k] = part[k] end
    pos = part[6 * m + 1]
    j = j + m
  end
  return t
end

-- The first m numbers of t as one string of little-endian doubles: one bulk reply for Redis to send instead of
-- m integer replies (each a conversion from Lua and a line of RESP), and for the client to read without
-- parsing text. Integers within ±2^53 (every figure of a reply) are exact in a double.
local function packReply(t, m)
  if m <= 512 then return struct.pack(doubles(m), unpack(t, 1, m)) end
  local parts = {}
  local k = 1
  while k <= m do
    local e = k + 511
    if e > m then e = m end
    parts[#parts + 1] = struct.pack(doubles(e - k + 1), unpack(t, k, e))
    k = e + 1
  end
  return table.concat(parts)
end
