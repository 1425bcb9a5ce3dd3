-- Write-behind merge (sync mode): adds each instance's consumed delta to the shared state and returns the
-- merged state, which replaces the instance's own. No limit check here: the instances already decided;
-- tokens they over-admitted together become debt (a negative bucket, a TAT past B·P/L, a count past L) that
-- every instance then repays before it admits again.
--   ARGV[1] = 1: the clock is Redis's TIME; 0: ARGV[2] is the time in Unix ms
--   ARGV[3] = n legs; then 5 per leg: algorithm, L, P, B, delta (tokens consumed since the last sync)
--   KEYS[n + 1] = this batch's marker: a merge that timed out may still run later, and its retry carries the
--                 same marker, so whichever runs second adds nothing and only reads the merged state.
--   KEYS[n + 2..] = the markers of the merges this one was split from (a merge that timed out is retried as
--                 two halves, each under its own marker). A parent marked '1' ran whole: this part adds
--                 nothing. Otherwise the parents are marked 's' (split), so a parent still queued in Redis
--                 that runs later finds its marker taken and adds nothing.
--   KEYS[i] = leg i's state, as check.lua stores it (lib.lua encodeState), read by one MGET up front.
-- Returns 3 integers per leg: w0, w1, lastSeen (the state as the kernel stores it).
local now = clockMs(ARGV)
local n = tonumber(ARGV[3])
local out = {}
local fresh = true
for m = n + 2, #KEYS do
  if redis.call('GET', KEYS[m]) == '1' then fresh = false end
end
if fresh then
  -- numbers as text: a number argument costs Redis a printf('%.17g')
  fresh = redis.call('SET', KEYS[n + 1], '1', 'NX', 'PX', '600000')
  if fresh then
    for m = n + 2, #KEYS do redis.call('SET', KEYS[m], 's', 'NX', 'PX', '600000') end
  end
end
local raw = readAll(KEYS, n)
-- the expiry of a merged state: on Redis's clock absolute, PXAT now + PX (as lua/check.lua writes it), else PX
local px, base = 'PX', 0
if ARGV[1] == '1' then px, base = 'PXAT', now end
-- states written by this run, by key (a key given twice reads what the first wrote)
local W0, W1, WL = {}, {}, {}

local function merge(alg, L, P, B, d, exists, w0, w1, last, t)
  if alg == 0 then
    local BP = B * P
    local x = BP
    if exists then
      local need = BP - w0
      if t - last >= cdiv(need, L) then x = BP else
        x = w0 + (t - last) * L
        if x > BP then x = BP end
      end
    end
    x = x - d * P
    return x, 0, cdiv(BP - x, L)
  elseif alg == 1 then
    local debt = 0
    if exists and w0 >= t then debt = (w0 - t) * L + w1 end
    local nd = debt + d * P
    local whole = fdiv(nd, L)
    return t + whole, nd - whole * L, cdiv(nd, L)
  elseif alg == 2 then
    local k, count = fwRoll(P, exists, w0, last, t)
    return count + d, 0, (k + 1) * P - t
  end
  local k, prev, cur = swRoll(P, exists, w0, w1, last, t)
  cur = cur + d
  if cur > 0 then return prev, cur, (k + 2) * P - t end
  return prev, cur, (k + 1) * P - t
end

for j = 1, n do
  local a = 4 + (j - 1) * 5
  local alg, L, P, B, d = num(ARGV[a]), num(ARGV[a + 1]), num(ARGV[a + 2]), num(ARGV[a + 3]), tonumber(ARGV[a + 4])
  if not fresh then d = 0 end
  -- a key that holds another type or a malformed value reads as absent (MGET gives false for another type),
  -- and the merge overwrites it: the write-behind owns its keys, and a poisoned one must not fail every merge
  -- that carries it
  local key = KEYS[j]
  local exists, w0, w1, last = false, 0, 0, 0
  if WL[key] then
    exists, w0, w1, last = true, W0[key], W1[key], WL[key]
  elseif raw[j] then
    local s0, s1, sl = decodeState(raw[j])
    if s0 then exists, w0, w1, last = true, s0, s1, sl end
  end
  local t = now
  if exists and last > t then t = last end
  local n0, n1, ttl = merge(alg, L, P, B, d, exists, w0, w1, last, t)
  -- a retry that finds its merge done changes nothing: it only reads
  if ttl > 0 and fresh then
    if ttl % 1 == 0 then
      redis.call('SET', key, encodeState(n0, n1, t), px, string.format('%d', base + ttl))
    else
      redis.call('SET', key, encodeState(n0, n1, t), 'PX', ttl)
    end
    W0[key], W1[key], WL[key] = n0, n1, t
  end
  out[(j - 1) * 3 + 1], out[(j - 1) * 3 + 2], out[(j - 1) * 3 + 3] = n0, n1, t
end
return out
