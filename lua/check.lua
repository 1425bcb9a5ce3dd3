-- The batch driver: decides every leg in KEYS/ARGV in order, in one atomic script run.
--   ARGV[1] = 1: the clock is Redis's TIME (strict mode); 0: ARGV[2] is the time in Unix ms
--   ARGV[3] = n legs; then 6 per leg: algorithm, L, P, B, cost, group length (first leg of a check, else 0)
--   KEYS[i] = leg i's state (lib.lua encodeState: w0, w1, lastSeen), written only by an admitted check that
--             costs something, with PX = its resetAfterMs, the time until the state carries no information
--             (bucket full, window over).
-- A group (a check's limits, then its guard's) is admitted only if every leg admits; then all legs commit.
-- Returns 4 integers per leg: code, remaining, resetAfterMs, retryAfterMs (−1 = never). A check with a leg
-- whose state cannot be read (a key of another type or a malformed value) gets UNREADABLE in every leg and
-- changes nothing; the other checks of the batch are decided as usual.
--
-- What it costs Redis: every key is read by one MGET up front (a key that is absent or of another type reads
-- as false; only those are told apart, by EXISTS). A key's state then lives in the slot of the first leg that
-- names it, so a group reads what the groups before it committed, and each key written is SET once, at the
-- end, with its last state and PX (the script is atomic: nothing sees the states in between). The ARGV
-- strings of a leg's limit usually repeat the previous leg's (one policy's L, P, B), and are parsed only when
-- they change.
local now = clockMs()
local n = tonumber(ARGV[3])
local out = {}

local raw = readAll(n)
-- by key: its slot (the index of the first leg naming it); by slot: S0, S1, SL the state (SL = −1: absent,
-- −2: unreadable), TTL the PX of its last write (nil: not written)
local SLOT, S0, S1, SL, TTL = {}, {}, {}, {}, {}
local dirty = {}
-- the last limit parsed: its ARGV strings and values
local pa, pL, pP, pB, alg, L, P, B

-- Evaluates leg j with cost c; returns its outputs, then (admitted with a cost) the state to write, its time
-- and the key's slot.
local function evaluate(j, c)
  local a = j * 6 - 2
  local sa, sL, sP, sB = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
  if sa ~= pa or sL ~= pL or sP ~= pP or sB ~= pB then
    pa, pL, pP, pB = sa, sL, sP, sB
    alg, L, P, B = num(sa), num(sL), num(sP), num(sB)
  end
  if L == 0 and alg <= 1 then
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
    code, rem, reset, retry, nw0, nw1 = ALG[alg](L, P, B, true, S0[s], S1[s], last, c, t)
  elseif last == -1 then
    code, rem, reset, retry, nw0, nw1 = ALG[alg](L, P, B, false, 0, 0, 0, c, t)
  else
    return UNREADABLE, 0, 0, 0
  end
  if code == ALLOW and c > 0 then return code, rem, reset, retry, nw0, nw1, t, s end
  return code, rem, reset, retry
end

-- per leg of the group being decided: the state it would write, its time, its slot
local X0, X1, XT, XS = {}, {}, {}, {}
local i = 1
while i <= n do
  local g = NUM[ARGV[i * 6 + 3]] or num(ARGV[i * 6 + 3])
  if g < 1 then g = 1 end
  if i + g - 1 > n then g = n - i + 1 end
  local all = true
  local unreadable = false
  for j = i, i + g - 1 do
    local o = j * 4 - 4
    local code, rem, reset, retry, nw0, nw1, t, s = evaluate(j, NUM[ARGV[j * 6 + 2]] or num(ARGV[j * 6 + 2]))
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
    elseif out[o + 1] == ALLOW then
      -- this leg alone would admit, but the check is denied: report its state untouched
      local code, rem, reset, retry = evaluate(j, 0)
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = code, rem, reset, retry
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
return out
