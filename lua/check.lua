-- The batch driver: decides every leg in KEYS/ARGV in order, in one atomic script run.
--   ARGV[1] = 1: the clock is Redis's TIME (strict mode); 0: ARGV[2] is the time in Unix ms
--   ARGV[3] = n legs; ARGV[4] = the legs packed, 6 little-endian doubles each (48 bytes): algorithm, L, P, B,
--             cost, group length (first leg of a check, else 0) + maxDelayMs·65536 (onLimit: delay, else 0:
--             src/engine/delay.ts SCRIPT_DELAY_SHIFT). One packed argument costs Redis one string
--             instead of 6 per leg to read, and the client one to write.
--   KEYS[i] = leg i's state (lib.lua encodeState: w0, w1, lastSeen), written only by an admitted check that
--             costs something, with PX = its resetAfterMs, the time until the state carries no information
--             (bucket full, window over).
-- A group (a check's limits, then its guard's) is admitted only if every leg admits; then all legs commit.
-- Returns 4 integers per leg: code, remaining, resetAfterMs, retryAfterMs (−1 = never); then the time the
-- script decided at (Unix ms: Redis's TIME, or ARGV[2]); then, for each leg of each denied check, in leg
-- order, the state it was decided on: w0, w1, lastSeen (−1: absent). A denied key's state only shrinks
-- afterwards (other callers only spend), so the caller can answer the same key's costlier checks without
-- Redis until it refills (src/engine/strict-cache.ts). A check with a leg whose state cannot be read (a key of another type or a
-- malformed value) gets UNREADABLE in every leg and changes nothing; the other checks of the batch are
-- decided as usual.
--
-- What it costs Redis: every key is read by one MGET up front (a key that is absent or of another type reads
-- as false; only those are told apart, by EXISTS). A key's state then lives in the slot of the first leg that
-- names it, so a group reads what the groups before it committed, and each key written is SET once, at the
-- end, with its last state and PX (the script is atomic: nothing sees the states in between).
local now = clockMs()
local n = tonumber(ARGV[3])
-- by leg: algorithm, L, P, B, cost, group length, maxDelayMs
local LA, LL, LP, LB, LC, LG, LD = {}, {}, {}, {}, {}, {}, {}
do
  local packed, unpack6, pos = ARGV[4], struct.unpack, 1
  local gd
  for j = 1, n do
    LA[j], LL[j], LP[j], LB[j], LC[j], gd, pos = unpack6('<dddddd', packed, pos)
    LG[j] = gd % 65536
    LD[j] = (gd - LG[j]) / 65536
  end
end
local out = {}

local raw = readAll(n)
-- by key: its slot (the index of the first leg naming it); by slot: S0, S1, SL the state (SL = −1: absent,
-- −2: unreadable), TTL the PX of its last write (nil: not written)
local SLOT, S0, S1, SL, TTL = {}, {}, {}, {}, {}
local dirty = {}
-- by leg: the state it was decided on (before its group committed)
local E0, E1, EL = {}, {}, {}
-- by leg: true for every leg of a denied check (its state is returned)
local DENIED = {}
-- Evaluates leg j with cost c (d: the most ms it may wait, onLimit: delay); returns its outputs, then
-- (admitted with a cost) the state to write, its time and the key's slot.
local function evaluate(j, c, d)
  local alg, L, P, B = LA[j], LL[j], LP[j], LB[j]
  if L == 0 and alg <= 1 then
    E0[j], E1[j], EL[j] = 0, 0, -1
    if c > 0 then return NEVER, 0, 0, -1 end
    return ALLOW, 0, 0, 0
  end
  local key = KEYS[j]
  local s = SLOT[key]
  if not s then
    s = j
    SLOT[key] = j
    local v = raw[j]
    if v then
      local w0, w1, last
      if alg == 5 then w0, w1, last = decodeLog(v) else w0, w1, last = decodeState(v) end
      if w0 then
        S0[j] = w0
        S1[j] = w1
        SL[j] = last
      else
        SL[j] = -2
      end
    elseif redis.call('EXISTS', key) == 1 then
      SL[j] = -2
    else
      SL[j] = -1
    end
  end
  local last = SL[s]
  local t = now
  local code, rem, reset, retry, nw0, nw1
  if last >= 0 then
    if last > t then t = last end
    code, rem, reset, retry, nw0, nw1 = ALG[alg](L, P, B, true, S0[s], S1[s], last, c, t, d)
  elseif last == -1 then
    code, rem, reset, retry, nw0, nw1 = ALG[alg](L, P, B, false, 0, 0, 0, c, t, d)
  else
    return UNREADABLE, 0, 0, 0
  end
  if code == ALLOW and c > 0 then return code, rem, reset, retry, nw0, nw1, t, s end
  local w0 = S0[s] or 0
  if type(w0) == 'table' then w0 = 0 end -- a sliding log's entries: the reply carries numbers only
  E0[j], E1[j], EL[j] = w0, S1[s] or 0, last
  return code, rem, reset, retry
end

-- per leg of the group being decided: the state it would write, its time, its slot
local X0, X1, XT, XS = {}, {}, {}, {}
local i = 1
while i <= n do
  local g = LG[i]
  if g < 1 then g = 1 end
  if i + g - 1 > n then g = n - i + 1 end
  local all = true
  local unreadable = false
  for j = i, i + g - 1 do
    local o = j * 4 - 4
    local code, rem, reset, retry, nw0, nw1, t, s = evaluate(j, LC[j], LD[j])
    out[o + 1] = code
    out[o + 2] = rem
    out[o + 3] = reset
    out[o + 4] = retry
    X0[j], X1[j], XT[j], XS[j] = nw0, nw1, t, s
    if code ~= ALLOW then
      all = false
      if code == UNREADABLE then unreadable = true end
    end
  end
  for j = i, i + g - 1 do
    local o = j * 4 - 4
    if unreadable then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = UNREADABLE, 0, 0, 0
    elseif all then
      local s = XS[j]
      if s then
        S0[s] = X0[j]
        S1[s] = X1[j]
        SL[s] = XT[j]
        if not TTL[s] then dirty[#dirty + 1] = s end
        TTL[s] = out[o + 3]
      end
    else
      DENIED[j] = true
      if out[o + 1] == ALLOW then
        -- this leg alone would admit, but the check is denied: report its state untouched
        local code, rem, reset, retry = evaluate(j, 0, 0)
        out[o + 1], out[o + 2], out[o + 3], out[o + 4] = code, rem, reset, retry
      end
    end
  end
  i = i + g
end
for k = 1, #dirty do
  local s = dirty[k]
  local v
  if type(S0[s]) == 'table' then v = encodeLog(S0[s]) else v = encodeState(S0[s], S1[s], SL[s]) end
  redis.call('SET', KEYS[s], v, 'PX', TTL[s])
end
local m = n * 4 + 1
out[m] = now
for j = 1, n do
  if DENIED[j] then
    out[m + 1], out[m + 2], out[m + 3] = E0[j], E1[j], EL[j]
    m = m + 3
  end
end
return out
