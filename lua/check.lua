-- The batch driver: decides every leg in KEYS/ARGV in order, in one atomic script run.
--   ARGV[1] = 1: the clock is Redis's TIME (strict mode); 0: ARGV[2] is the time in Unix ms
--   ARGV[3] = n legs; ARGV[4] = the legs packed, 6 little-endian doubles each (48 bytes): algorithm, L, P, B,
--             cost, group length (first leg of a check, else 0). One packed argument costs Redis one string
--             instead of 6 per leg to read, and the client one to write.
--   KEYS[i] = leg i's state (lib.lua encodeState: w0, w1, lastSeen), written only by an admitted check that
--             costs something, with PX = its resetAfterMs, the time until the state carries no information
--             (bucket full, window over).
-- A group (a check's limits, then its guard's) is admitted only if every leg admits; then all legs commit.
-- Returns one string of little-endian doubles (lib.lua packReply): 4 per leg: code, remaining, resetAfterMs,
-- retryAfterMs (−1 = never); then the time the script decided at (Unix ms: Redis's TIME, or ARGV[2]); then,
-- for each leg of each denied check, in leg order, the state it was decided on: w0, w1, lastSeen (−1:
-- absent). A denied key's state only shrinks afterwards (other callers only spend), so the caller can answer
-- the same key's costlier checks without Redis until it refills (src/engine/strict-cache.ts). A check with a
-- leg whose state cannot be read (a key of another type or a malformed value) gets UNREADABLE in every leg
-- and changes nothing; the other checks of the batch are decided as usual.
--
-- What it costs Redis (instructions counted with callgrind: bench/README.md): every key is read by one
-- MGET up front (a key that is absent or of another type reads as false; only those are told apart, by
-- EXISTS). A key's state then lives in the slot of the first leg that names it, so a group reads what the
-- groups before it committed, and each key written is SET once, at the end, with its last state and PX (the
-- script is atomic: nothing sees the states in between). The legs are unpacked by one struct.unpack per 64,
-- the reply packed by one struct.pack per 512 numbers, and the per-leg work keeps to flat tables filled in
-- order: a table per field and a function call per leg cost Redis more than the arithmetic.
local now = clockMs()
local n = tonumber(ARGV[3])
local LEG = unpackLegs(ARGV[4], n)
local raw = readAll(n)
-- by key: its slot (the index of the first leg naming it); by slot: W0, W1, WL its state (WL = −1: absent,
-- −2: unreadable), TTL the PX of its last write (nil: not written)
local SLOT, W0, W1, WL, TTL = {}, {}, {}, {}, {}
local dirty, nd = {}, 0
-- 4 numbers per leg, then the time, then the denied legs' states
local out = {}
local tail, nt = {}, 0

-- The slot holding leg j's key, reading its state on first sight.
local function slotOf(j, alg)
  local key = KEYS[j]
  local s = SLOT[key]
  if s then return s end
  SLOT[key] = j
  local v = raw[j]
  if v then
    local w0, w1, last
    if alg == 5 then w0, w1, last = decodeLog(v) else w0, w1, last = decodeState(v) end
    if w0 then
      W0[j], W1[j], WL[j] = w0, w1, last
    else
      WL[j] = -2
    end
  elseif redis.call('EXISTS', key) == 1 then
    WL[j] = -2
  else
    WL[j] = -1
  end
  return j
end

-- Leg j (at b in LEG) with cost c: code, remaining, resetAfterMs, retryAfterMs, and for an admission that
-- costs something the state to write, its time and the key's slot. Denied (or free): the state it was
-- decided on goes to the tail when the caller says so (keep).
local function evaluate(j, b, c)
  local alg, L = LEG[b + 1], LEG[b + 2]
  if L == 0 and alg <= 1 then
    if c > 0 then return NEVER, 0, 0, -1 end
    return ALLOW, 0, 0, 0
  end
  local s = slotOf(j, alg)
  local last = WL[s]
  if last >= 0 then
    local t = now
    if last > t then t = last end
    local code, rem, reset, retry, nw0, nw1 = ALG[alg](L, LEG[b + 3], LEG[b + 4], true, W0[s], W1[s], last, c, t)
    if code == ALLOW and c > 0 then return code, rem, reset, retry, nw0, nw1, t, s end
    return code, rem, reset, retry
  elseif last == -1 then
    local code, rem, reset, retry, nw0, nw1 = ALG[alg](L, LEG[b + 3], LEG[b + 4], false, 0, 0, 0, c, now)
    if code == ALLOW and c > 0 then return code, rem, reset, retry, nw0, nw1, now, s end
    return code, rem, reset, retry
  end
  return UNREADABLE, 0, 0, 0
end

-- Appends the state leg j was decided on (its key's committed state) to the tail.
local function keep(j, b)
  local alg = LEG[b + 1]
  if LEG[b + 2] == 0 and alg <= 1 then
    tail[nt + 1], tail[nt + 2], tail[nt + 3] = 0, 0, -1
  else
    local s = SLOT[KEYS[j]]
    local w0 = W0[s] or 0
    if type(w0) == 'table' then w0 = 0 end -- a sliding log's entries: the reply carries numbers only
    tail[nt + 1], tail[nt + 2], tail[nt + 3] = w0, W1[s] or 0, WL[s]
  end
  nt = nt + 3
end

local function commit(s, nw0, nw1, t, reset)
  W0[s], W1[s], WL[s] = nw0, nw1, t
  if not TTL[s] then
    nd = nd + 1
    dirty[nd] = s
  end
  TTL[s] = reset
end

-- per leg of a group of several: the state it would write, its time, its slot
local X0, X1, XT, XS = {}, {}, {}, {}
local i = 1
while i <= n do
  local b = i * 6 - 6
  local g = LEG[b + 6]
  if g < 1 then g = 1 end
  if i + g - 1 > n then g = n - i + 1 end
  local o = i * 4 - 4
  if g == 1 then
    -- one leg (the common case), inlined: decided and committed at once
    local alg, L, c = LEG[b + 1], LEG[b + 2], LEG[b + 5]
    local code, rem, reset, retry
    if L == 0 and alg <= 1 then
      if c > 0 then code, rem, reset, retry = NEVER, 0, 0, -1 else code, rem, reset, retry = ALLOW, 0, 0, 0 end
      if c > 0 then
        tail[nt + 1], tail[nt + 2], tail[nt + 3] = 0, 0, -1
        nt = nt + 3
      end
    else
      local key = KEYS[i]
      local s = SLOT[key]
      if not s then s = slotOf(i, alg) end
      local last = WL[s]
      local t = now
      local nw0, nw1
      if last >= 0 then
        if last > t then t = last end
        code, rem, reset, retry, nw0, nw1 = ALG[alg](L, LEG[b + 3], LEG[b + 4], true, W0[s], W1[s], last, c, t)
      elseif last == -1 then
        code, rem, reset, retry, nw0, nw1 = ALG[alg](L, LEG[b + 3], LEG[b + 4], false, 0, 0, 0, c, t)
      else
        code, rem, reset, retry = UNREADABLE, 0, 0, 0
      end
      if code == ALLOW then
        if c > 0 then
          W0[s], W1[s], WL[s] = nw0, nw1, t
          if not TTL[s] then
            nd = nd + 1
            dirty[nd] = s
          end
          TTL[s] = reset
        end
      elseif code ~= UNREADABLE then
        local w0 = W0[s] or 0
        if type(w0) == 'table' then w0 = 0 end
        tail[nt + 1], tail[nt + 2], tail[nt + 3] = w0, W1[s] or 0, last
        nt = nt + 3
      end
    end
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = code, rem, reset, retry
  else
    local all, unreadable = true, false
    for j = i, i + g - 1 do
      local bj = j * 6 - 6
      local code, rem, reset, retry, nw0, nw1, t, s = evaluate(j, bj, LEG[bj + 5])
      local oj = j * 4 - 4
      out[oj + 1], out[oj + 2], out[oj + 3], out[oj + 4] = code, rem, reset, retry
      X0[j], X1[j], XT[j], XS[j] = nw0, nw1, t, s
      if code ~= ALLOW then
        all = false
        if code == UNREADABLE then unreadable = true end
      end
    end
    for j = i, i + g - 1 do
      local oj = j * 4 - 4
      if unreadable then
        out[oj + 1], out[oj + 2], out[oj + 3], out[oj + 4] = UNREADABLE, 0, 0, 0
      elseif all then
        local s = XS[j]
        if s then commit(s, X0[j], X1[j], XT[j], out[oj + 3]) end
      else
        local bj = j * 6 - 6
        if out[oj + 1] == ALLOW then
          -- this leg alone would admit, but the check is denied: report its state untouched
          out[oj + 1], out[oj + 2], out[oj + 3], out[oj + 4] = evaluate(j, bj, 0)
        end
        keep(j, bj)
      end
    end
  end
  i = i + g
end
for k = 1, nd do
  local s = dirty[k]
  local v
  if type(W0[s]) == 'table' then v = encodeLog(W0[s]) else v = encodeState(W0[s], W1[s], WL[s]) end
  redis.call('SET', KEYS[s], v, 'PX', TTL[s])
end
local m = n * 4 + 1
out[m] = now
for k = 1, nt do out[m + k] = tail[k] end
return packReply(out, m + nt)
