-- The batch driver: decides every leg in KEYS/ARGV in order, in one atomic script run.
--   ARGV[1] = 1: the clock is Redis's TIME (strict mode); 0: ARGV[2] is the time in Unix ms
--   ARGV[3] = n legs; then 6 per leg: algorithm, L, P, B, cost, group length (first leg of a check, else 0)
--   KEYS[i] = leg i's state: "w0 w1 lastSeen", written only by an admitted check that costs something, with
--             PX = its resetAfterMs, the time until the state carries no information (bucket full, window over).
-- A group (a check's limits, then its guard's) is admitted only if every leg admits; then all legs commit.
-- Returns 4 integers per leg: code, remaining, resetAfterMs, retryAfterMs (−1 = never). A check with a leg
-- whose state cannot be read (a key of another type or a malformed value) gets UNREADABLE in every leg and
-- changes nothing; the other checks of the batch are decided as usual.
local now = clockMs()
local n = tonumber(ARGV[3])
local out = {}

local function leg(j)
  local a = 4 + (j - 1) * 6
  return tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
end

-- exists, w0, w1, last; nil when the key holds something that is not a state
local function state(j)
  local raw = redis.pcall('GET', KEYS[j])
  if not raw then return false, 0, 0, 0 end
  if type(raw) ~= 'string' then return nil end
  local w0, w1, last = string.match(raw, '^(-?%d+) (%d+) (%d+)$')
  if not w0 then return nil end
  return true, tonumber(w0), tonumber(w1), tonumber(last)
end

-- Evaluates leg j with cost c; returns its outputs and what to write (nil: nothing).
local function evaluate(j, c)
  local alg, L, P, B = leg(j)
  if L == 0 and alg <= 1 then
    if c > 0 then return NEVER, 0, 0, -1 end
    return ALLOW, 0, 0, 0
  end
  local exists, w0, w1, last = state(j)
  if exists == nil then return UNREADABLE, 0, 0, 0 end
  local t = now
  if exists and last > t then t = last end
  local code, rem, reset, retry, nw0, nw1 = ALG[alg](L, P, B, exists, w0, w1, last, c, t)
  if code == ALLOW and c > 0 then return code, rem, reset, retry, string.format('%.0f %.0f %.0f', nw0, nw1, t) end
  return code, rem, reset, retry
end

local i = 1
while i <= n do
  local g = tonumber(ARGV[4 + (i - 1) * 6 + 5])
  if g < 1 then g = 1 end
  if i + g - 1 > n then g = n - i + 1 end
  local all = true
  local unreadable = false
  local writes = {}
  for j = i, i + g - 1 do
    local _, _, _, _, c = leg(j)
    local code, rem, reset, retry, w = evaluate(j, c)
    out[(j - 1) * 4 + 1], out[(j - 1) * 4 + 2], out[(j - 1) * 4 + 3], out[(j - 1) * 4 + 4] = code, rem, reset, retry
    writes[j] = w
    if code ~= ALLOW then all = false end
    if code == UNREADABLE then unreadable = true end
  end
  for j = i, i + g - 1 do
    if unreadable then
      out[(j - 1) * 4 + 1], out[(j - 1) * 4 + 2], out[(j - 1) * 4 + 3], out[(j - 1) * 4 + 4] = UNREADABLE, 0, 0, 0
    elseif all then
      if writes[j] then redis.call('SET', KEYS[j], writes[j], 'PX', out[(j - 1) * 4 + 3]) end
    elseif out[(j - 1) * 4 + 1] == ALLOW then
      -- this leg alone would admit, but the check is denied: report its state untouched
      local code, rem, reset, retry = evaluate(j, 0)
      out[(j - 1) * 4 + 1], out[(j - 1) * 4 + 2], out[(j - 1) * 4 + 3], out[(j - 1) * 4 + 4] = code, rem, reset, retry
    end
  end
  i = i + g
end
return out
