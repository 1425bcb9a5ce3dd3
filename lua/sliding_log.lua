-- Sliding log, as assembly/algorithms/sliding-log.ts: the admitted cost in (t − P, t], one entry per ms.
-- Its stored value is not lib.lua's 24-byte state but the log itself, packed: little-endian doubles
-- ts1, count1, ts2, count2, ... oldest first (at most min(L, P) ≤ maxLogEntries pairs, 1,024 at most: 16 KiB), written with PX = P
-- after an admission, when the newest entry leaves. In the driver (check.lua) its state is (w0 = the list of
-- entries as a flat Lua table, w1 = 0, lastSeen = the newest entry's time); an admission returns a new list,
-- so a group that is denied leaves the read one untouched.

-- entries, 0, newest time of a stored log, or nil when the value is not one
local function decodeLog(raw)
  local n = #raw
  if n == 0 or n % 16 ~= 0 or n > 1024 * 16 then return nil end
  local e = {}
  local pos = 1
  local last = 0
  for k = 1, n / 16 do
    local ts, count
    ts, count, pos = struct.unpack('<dd', raw, pos)
    if ts % 1 ~= 0 or count % 1 ~= 0 or ts < last or ts > MAXN or count < 1 or count > MAXN then return nil end
    e[2 * k - 1], e[2 * k] = ts, count
    last = ts
  end
  return e, 0, last
end

local function encodeLog(e)
  return struct.pack('<' .. string.rep('d', #e), unpack(e))
end

ALG[5] = function(L, P, B, exists, w0, w1, last, c, t)
  local e = exists and w0 or {}
  local sum, newest, first = 0, 0, nil
  for k = 1, #e, 2 do
    if e[k] + P > t then
      if not first then first = k end
      sum = sum + e[k + 1]
      newest = e[k]
    end
  end
  local room = L - sum
  if room < 0 then room = 0 end
  local reset = 0
  if first then reset = newest + P - t end
  if c > L then return NEVER, room, reset, -1, w0, w1 end
  if c <= room then
    if c == 0 then return ALLOW, room, reset, 0, w0, w1 end
    local out = {}
    if first then
      for k = first, #e do out[#out + 1] = e[k] end
    end
    if #out > 0 and out[#out - 1] == t then out[#out] = out[#out] + c
    else out[#out + 1] = t; out[#out + 1] = c end
    return ALLOW, room - c, P, 0, out, 0
  end
  local stay = sum
  for k = first, #e, 2 do
    stay = stay - e[k + 1]
    if stay + c <= L then return DENY, room, reset, e[k] + P - t, w0, w1 end
  end
  return UNREADABLE, 0, 0, 0, w0, w1 -- unreachable: an empty log admits any c ≤ L
end
