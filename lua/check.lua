-- The batch driver: decides every leg in KEYS/ARGV in order, in one atomic script run.
--   ARGV[1] = 1: the clock is Redis's TIME (strict mode); 0: ARGV[2] is the time in Unix ms
--   ARGV[3] = n legs; ARGV[4] = the legs packed, 6 little-endian doubles each (48 bytes): algorithm, L, P, B,
--             cost, group length (first leg of a check, else 0) + maxDelayMs·65536 (onLimit: delay, else 0:
--             src/engine/delay.ts SCRIPT_DELAY_SHIFT). One packed argument costs Redis one string
--             instead of 6 per leg to read, and the client one to write. The algorithm + UNIQUE (16) on a
--             check of one leg: the caller says no other leg of the call names its key
--             (src/store/contract.ts UNIQUE_KEY), so the leg is decided and its write queued without the
--             bookkeeping that lets later legs of the call see a key's new state. The algorithm + RUN·r
--             (32·r) on such a leg: the r legs after it are single-leg token-bucket checks on unique keys with
--             its L, P, B and cost (src/store/leg-runs.ts). They are not packed (ARGV[4] holds the legs
--             without them: 1,488 bytes less to read and intern for a run of 32, ~0.7 k Redis instructions
--             per decision) and are decided with the head's numbers.
--   KEYS[i] = leg i's state (lib.lua encodeState: w0, w1, lastSeen), written only by an admitted check that
--             costs something, with its resetAfterMs, the time until the state carries no information
--             (bucket full, window over), as its expiry, rounded up to the next whole second (never early, at
--             most 999 ms late): PEXPIREAT on Redis's clock, else PEXPIRE (see expiryText).
-- A group (a check's limits, then its guard's) is admitted only if every leg admits; then all legs commit.
-- Returns one string of little-endian doubles (lib.lua packReply): a row per leg, in leg order: 3 numbers,
-- code, remaining, resetAfterMs; or, for a single-leg token-bucket check admitted at a cost above 0 without a
-- delay (the common case), 1 number, ADMITTED: −1 − the tokens·P left in its bucket (the sign tells the rows
-- apart: codes are ≥ 0), from which the caller, who sent L, P and B, has remaining = ⌊left / P⌋ and
-- resetAfterMs = ⌈(B·P − left) / L⌉ as this script computes them (2 numbers fewer to compute, pack, intern and
-- send: ~1.5 k Redis instructions per decision); then the time the script decided at (Unix ms: Redis's TIME,
-- or ARGV[2]); then the retryAfterMs (−1 = never) of each leg whose retryAfterMs is not 0, in leg order, its
-- code + RETRIED (8) saying so; then, for each leg of each denied check, in leg order, the state it was
-- decided on: w0, w1, lastSeen (−1: absent). src/store/reply.ts unpackReply gives the caller 4 numbers per
-- leg again. A denied key's state only shrinks afterwards (other callers only
-- spend), so the caller can answer the same key's costlier checks without Redis until it refills
-- (src/engine/strict/over-limit.ts). A check with a
-- leg whose state cannot be read (a key of another type or a malformed value) gets UNREADABLE in every leg
-- and changes nothing; the other checks of the batch are decided as usual.
--
-- What it costs Redis (instructions counted with callgrind: bench/README.md): every key is read by one
-- MGET up front (a key that is absent or of another type reads as false; those are told apart by EXISTS, one
-- for all of them when none exists). A key's state then lives in the slot of the first leg that names it, so
-- a group reads what the groups before it committed, and each key written is written once, at the end, with
-- its last state and expiry: one MSET for all of them, then a PEXPIREAT each (the script is atomic: nothing
-- sees the states in between). A single leg (the common
-- case) is read by one struct.unpack of its 48 bytes and decided inline, the token bucket's admitting path
-- written out; a run's later legs skip that read and the tests of the leg's shape, and a token bucket's
-- admission answers one number (21.0 k instructions per decision in all at 32 checks a call, 20.3 k at 64:
-- bench/README.md); the reply is packed by one struct.pack per 512 numbers.
-- Calls, table lookups and number formatting cost Redis more than the arithmetic: see the notes below.
-- The script runs as a Redis Function (FCALL; src/store/scripts.ts checkLibrary), its helpers and scratch
-- tables made once when the library loads, or as an EVAL chunk (checkScript: a Redis
-- that refuses FUNCTION LOAD), which makes them on every call. Per call, the state below is reset before use:
-- scratch entries by slot are written at a key's first sight before they are read, ABSENT entries carry the
-- call's stamp, and the tables that are keyed by key (SLOT) are made anew.
local NMAXN = -MAXN
-- added to a single-leg check's algorithm by a caller that knows no other leg of the call names its key
local UNIQUE = 16
-- added to a leg's code in the reply when its retryAfterMs follows (src/store/reply.ts RETRIED)
local RETRIED = 8
-- times r, added to the algorithm of a leg that heads a run (src/store/leg-runs.ts RUN_MARK): the r legs after
-- it are single-leg token-bucket checks on unique keys with its L, P, B and cost, not packed in ARGV[4]: they
-- are decided with the head's numbers
local RUN = 32

-- ARGV[4] as one flat table of 6 numbers for each of the n legs: the packed legs (lib.lua unpackLegs), each
-- run's later legs (not packed) given their head's numbers, the run mark taken off their algorithm.
local function legsOf(packed, n)
  local m = (#packed - #packed % 48) / 48
  local T = unpackLegs(packed, m)
  if m >= n then return T end
  local F, j = {}, 0
  for k = 1, 6 * m, 6 do
    local a = T[k]
    F[j + 1], F[j + 2], F[j + 3], F[j + 4], F[j + 5], F[j + 6] = a, T[k + 1], T[k + 2], T[k + 3], T[k + 4], T[k + 5]
    j = j + 6
    if a >= RUN then
      local h = a % RUN
      for _ = 1, (a - h) / RUN do
        F[j + 1], F[j + 2], F[j + 3], F[j + 4], F[j + 5], F[j + 6] = h, T[k + 1], T[k + 2], T[k + 3], T[k + 4], T[k + 5]
        j = j + 6
      end
    end
  end
  return F
end
-- struct.pack, struct.unpack, string.format, taken per call: a library's code sees no libraries while it loads
local spack, sunpack, sformat
-- per call: the time, the number of legs, the keys, their MGET values, the legs as one flat table (6 numbers
-- per leg, unpacked on the first group of several legs: a single leg, the common case, reads its 6 numbers by
-- one struct.unpack of its own 48 bytes into locals), redis.call
local now, n, KS, raw, LEG, rcall
-- A table whose array part holds 64 entries from the start: filled one by one from {}, a table is rebuilt 7
-- times on its way to 64 (Lua 5.1 has no table.new; a constructor of 64 nils sizes it at once)
local function t64()
  return { nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
    nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
    nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil,
    nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil }
end
-- by key: its slot (the index of the first leg naming it); by slot: W0, W1, WL its state (WL = −1: absent,
-- −2: unreadable), TTL the PX of its last write (false: not written), LOG true while W0 holds a sliding log's
-- entries (a table) rather than a number
local SLOT, W0, W1, WL, TTL, LOG = nil, t64(), t64(), t64(), t64(), {}
local dirty, nd = t64(), 0
-- each leg's row (3 numbers, or 1: ADMITTED), then the time, then the retries, then the denied legs' states
-- (the header says how)
local out = {}
-- the retryAfterMs of the legs whose code says RETRIED, in leg order, until they go to out after the time
local RT = {}
-- per leg of a group of several: its 4 outputs (code, remaining, resetAfterMs, retryAfterMs) until the group
-- is settled and they go to out
local GO = {}
local tail, nt = {}, 0
-- by leg: the stamp of the call whose one EXISTS of several keys found its key absent; legs up to probed
-- were in such an EXISTS
local ABSENT, probed, stamp = {}, 0, 0

-- The state (w0, w1, lastSeen; lastSeen −1: absent, −2: unreadable) of leg j's key from v, its MGET value
-- (false: absent or of another type), for alg j's algorithm.
local function read(j, alg, v)
  if v then
    local w0, w1, last
    if alg == 5 then w0, w1, last = decodeLog(v) else w0, w1, last = decodeState(v) end
    if w0 then return w0, w1, last end
    return nil, nil, -2
  end
  -- absent, or a key of another type, told apart by EXISTS: one EXISTS of the next keys read as false (up
  -- to 512) that answers 0 settles them all (the common case: new keys); else one per key
  if ABSENT[j] == stamp then return nil, nil, -1 end
  if j > probed then
    local ks, at, m, k = {}, {}, 0, j
    while k <= n and m < 512 do
      if not raw[k] then
        m = m + 1
        ks[m], at[m] = KS[k], k
      end
      k = k + 1
    end
    probed = k - 1
    if m > 1 and rcall('EXISTS', unpack(ks, 1, m)) == 0 then
      for q = 1, m do ABSENT[at[q]] = stamp end
      return nil, nil, -1
    end
  end
  if rcall('EXISTS', KS[j]) == 1 then return nil, nil, -2 end
  return nil, nil, -1
end

-- Slot s takes state (w0, w1, last) from a leg of algorithm alg.
local function store(s, alg, w0, w1, last)
  W0[s], W1[s], WL[s] = w0, w1, last
  LOG[s] = alg == 5 and last >= 0
end

-- The slot holding leg j's key, reading its state on first sight.
local function slotOf(j, alg)
  local key = KS[j]
  local s = SLOT[key]
  if s then return s end
  SLOT[key] = j
  TTL[j] = false
  store(j, alg, read(j, alg, raw[j]))
  return j
end

-- Leg j (at b in LEG) with cost c and d the most ms it may wait (onLimit: delay, else 0): code, remaining,
-- resetAfterMs, retryAfterMs (an admission's delay), and for an admission that costs something the state to
-- write, its time and the key's slot. Denied (or free): the state it was decided on goes to the tail when the
-- caller says so (keep).
local function evaluate(j, b, c, d)
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
    local code, rem, reset, retry, nw0, nw1 = ALG[alg](L, LEG[b + 3], LEG[b + 4], true, W0[s], W1[s], last, c, t, d)
    if code == ALLOW and c > 0 then return code, rem, reset, retry, nw0, nw1, t, s end
    return code, rem, reset, retry
  elseif last == -1 then
    local code, rem, reset, retry, nw0, nw1 = ALG[alg](L, LEG[b + 3], LEG[b + 4], false, 0, 0, 0, c, now, d)
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
    local s = SLOT[KS[j]]
    local w0 = W0[s] or 0
    if LOG[s] then w0 = 0 end -- a sliding log's entries: the reply carries numbers only
    tail[nt + 1], tail[nt + 2], tail[nt + 3] = w0, W1[s] or 0, WL[s]
  end
  nt = nt + 3
end

local function commit(s, nw0, nw1, t, reset, alg)
  store(s, alg, nw0, nw1, t)
  if not TTL[s] then
    nd = nd + 1
    dirty[nd] = s
  end
  TTL[s] = reset
end

-- per leg of a group of several: the state it would write, its time, its slot
local X0, X1, XT, XS = {}, {}, {}, {}
-- the MSET's arguments: key, state, key, state, ...
local MSET = {}
-- per key written, in the MSET's order: its expiry as text (expiryText)
local XX = {}
-- per call: PEXPIREAT's base, the call's time (Redis's clock), or PEXPIRE's, 0 (the caller's clock)
local xbase = 0
-- expiryText's texts by expiry (whole seconds, so a call's keys share a few), emptied past 4096
local XTEXT, nxtext = {}, 0

-- The expiry of leg j's key, whose state carries information for ttl more ms (resetAfterMs), as the text the
-- expiry command takes: xbase + ttl rounded up to the next whole second. A key lives at most 999 ms longer
-- than its state matters (shared/cases 03 allows 1 s), never shorter, and the text is made by one
-- string.format('%d') per second instead of per key (a number argument would cost Redis a printf('%.17g'),
-- twice that) and kept in XTEXT: ~0.7 k of the ~31 k Redis instructions per decision (callgrind: the README's
-- Redis section). The unique-key path writes the rounding and the XTEXT lookup out inline and calls this only
-- for a text not made yet: the Lua call costs more than the arithmetic. A ttl that is not a positive integer
-- (none is) goes to Redis as the PX of a SET, for it to refuse: the script fails before anything is written.
local function expiryText(j, ttl)
  if not (ttl > 0 and ttl % 1 == 0) then rcall('SET', KS[j], '', 'PX', ttl) end
  local a = xbase + ttl
  local r = a % 1000
  if r > 0 then a = a - r + 1000 end
  local text = XTEXT[a]
  if text then return text end
  if nxtext == 4096 then XTEXT, nxtext = {}, 0 end
  text = sformat('%d', a)
  XTEXT[a] = text
  nxtext = nxtext + 1
  return text
end

-- One call: KEYS and ARGV as the header says. The hot tables as locals (a register instead of an upvalue per
-- use); nd and nt stay upvalues, which commit and keep also advance.
local function check(K, ARGV)
KS, rcall = K, redis.call
spack, sunpack, sformat = struct.pack, struct.unpack, string.format
now = clockMs(ARGV)
n = tonumber(ARGV[3])
local ARG4 = ARGV[4]
raw = readAll(K, n)
LEG, SLOT, nd, nt, probed, stamp = nil, {}, 0, 0, 0, stamp + 1
-- the expiry: absolute on Redis's clock (the instant the state stops carrying information); on the caller's
-- clock (ARGV[1] = 0) relative to Redis's own
local pe = 'PEXPIRE'
xbase = 0
if ARGV[1] == '1' then pe, xbase = 'PEXPIREAT', now end
local KEYS, raw, SLOT, W0, W1, WL, TTL, LOG, out, tail, dirty, now = K, raw, SLOT, W0, W1, WL, TTL, LOG, out, tail, dirty, now
-- nx: the keys written so far (their states at MS[2 k], their expiries' texts at XX[k]); the constants and the
-- per-call helpers as locals too
local MS, ms, XX, nx = MSET, 0, XX, 0
local NMAXN, MAXN, XTEXT, spack, xbase = NMAXN, MAXN, XTEXT, spack, xbase
-- i: the leg; o: its place in out; pos: its place in ARG4 (a run's later legs have none); nr: the retries
-- (their retryAfterMs in RT), which go after the time
local i, o, pos = 1, 0, 1
local RT, nr = RT, 0
-- the run being decided (legs up to re): its head's 6 numbers (the algorithm without the run mark), which are
-- its later legs' too; rok when the shortcut below may decide them, with B·P and cost·P
local re, hA, hL, hP, hB, hc, hG = 0, 0, 0, 0, 0, 0, 0
local rok, rBP, rcP = false, 0, 0
while i <= n do
  -- a leg of a run: its bucket's tokens·P now (x) from its MGET value, or nil (a state that is absent before
  -- EXISTS has said so, or not plainly valid: the leg goes the general way below, as does a denial)
  local x, t
  local later = i <= re
  if later and rok then
    local v = raw[i]
    t = now
    if v then
      if #v == 24 then
        local w0, w1, last = sunpack('<ddd', v)
        if w0 % 1 + w1 % 1 + last % 1 == 0 and w0 >= NMAXN and w0 <= MAXN and w1 >= 0 and w1 <= MAXN
          and last >= 0 and last <= MAXN then
          if last > t then t = last end
          x = w0 + (t - last) * hL
          if x > rBP then x = rBP end
        end
      end
    elseif ABSENT[i] == stamp then
      x = rBP
    end
  end
  if x and rcP <= x then
    -- admitted: the unique path's token bucket below, with the run's numbers (c > 0, so after < B·P and the
    -- reset is a positive integer)
    local after = x - rcP
    local a = rBP - after
    local r = a % hL
    local q = (a - r) / hL
    if r < 0 then q = q - 1 elseif r >= hL then q = q + 1 end
    if q * hL < a then q = q + 1 end
    MS[ms + 1], MS[ms + 2] = KEYS[i], spack('<ddd', after, 0, t)
    ms = ms + 2
    a = xbase + q
    r = a % 1000
    if r > 0 then a = a - r + 1000 end
    local text = XTEXT[a]
    if not text then text = expiryText(i, q) end
    nx = nx + 1
    XX[nx] = text
    -- the admission's row: −1 − its tokens·P left (ADMITTED), from which the caller has remaining and resetAfterMs
    out[o + 1] = -1 - after
    i = i + 1
    o = o + 1
  else
    -- a run's later leg has its head's numbers (it is not in ARG4); any other leg reads its own 48 bytes
    local alg, L, P, B, c, gd
    if later then
      alg, L, P, B, c, gd = hA, hL, hP, hB, hc, hG
    else
      alg, L, P, B, c, gd = sunpack('<dddddd', ARG4, pos)
      if alg >= RUN then
        -- a run's head: decided below like any leg; the run's legs after it take the shortcut above. A run of
        -- anything but admissible token-bucket checks on unique keys (none is marked so) is decided leg by
        -- leg, each with the head's numbers
        local r = (alg - alg % RUN) / RUN
        alg = alg % RUN
        re, hA, hL, hP, hB, hc, hG = i + r, alg, L, P, B, c, gd
        rok = alg == UNIQUE and gd == 1 and c > 0 and c <= B and L > 0 and P > 0
        if rok then rBP, rcP = B * P, c * P end
      end
    end
    -- the group length (below 65536; above it, on any leg, its maxDelayMs: onLimit: delay)
    local g = gd % 65536
    if g ~= 1 then
      if g < 1 then g = 1 end
      if i + g - 1 > n then g = n - i + 1 end
    end
    if g == 1 then
      -- one leg (the common case), inlined: decided and committed at once. A unique key (u) needs no slot: its
      -- state is read from its MGET value and its new state goes straight to the MSET
      local u = alg >= UNIQUE
      if u then alg = alg - UNIQUE end
      local code, rem, reset, retry, nw0
      if L == 0 and alg <= 1 then
        if c > 0 then
          code, rem, reset, retry = NEVER, 0, 0, -1
          tail[nt + 1], tail[nt + 2], tail[nt + 3] = 0, 0, -1
          nt = nt + 3
        else
          code, rem, reset, retry = ALLOW, 0, 0, 0
        end
      else
        -- the key's state: its slot's, or read on first sight (into the slot once decided: committed, or as
        -- read; a unique key's has no slot)
        local s, w0, w1, last
        local first = u
        if not u then
          local key = KEYS[i]
          s = SLOT[key]
          first = not s
          if first then
            s = i
            SLOT[key] = i
            TTL[i] = false
          end
        end
        if first then
          local v = raw[i]
          if v and alg ~= 5 and #v == 24 then
            -- lib.lua decodeState's packed case, inlined. x % 1 is in [0, 1) for a finite x and NaN for ±inf
            -- or NaN, so the sum is 0 exactly when all three are integers
            w0, w1, last = sunpack('<ddd', v)
            if not (w0 % 1 + w1 % 1 + last % 1 == 0 and w0 >= NMAXN and w0 <= MAXN and w1 >= 0 and w1 <= MAXN
              and last >= 0 and last <= MAXN) then
              w0, w1, last = read(i, alg, v)
            end
          else
            w0, w1, last = read(i, alg, v)
          end
        else
          w0, w1, last = W0[s], W1[s], WL[s]
        end
        local t = now
        local nw1
        if last == -2 then
          code, rem, reset, retry = UNREADABLE, 0, 0, 0
        elseif alg == 0 then
          -- token_bucket.lua (ALG[0]) inlined on its admitting path, its divisions (lib.lua fdiv, cdiv) written
          -- out: a Lua call costs Redis more than the arithmetic. Any other outcome: ALG[0] itself.
          local BP = B * P
          local x = BP
          if last >= 0 then
            if last > t then t = last end
            -- the refill, capped (ALG[0] says why it is exact)
            x = w0 + (t - last) * L
            if x > BP then x = BP end
          end
          local cP = c * P
          if c <= B and (c == 0 or cP <= x) then
            local after = x - cP
            if after < 0 then rem = 0 else -- a peek in debt
              local r = after % P
              rem = (after - r) / P
              if r < 0 then rem = rem - 1 elseif r >= P then rem = rem + 1 end
            end
            local a = BP - after
            local r = a % L
            local q = (a - r) / L
            if r < 0 then q = q - 1 elseif r >= L then q = q + 1 end
            if q * L < a then q = q + 1 end
            code, reset, retry, nw0, nw1 = ALLOW, q, 0, after, 0
          elseif last >= 0 then
            code, rem, reset, retry, nw0, nw1 = ALG[0](L, P, B, true, w0, w1, last, c, t, (gd - gd % 65536) / 65536)
          else
            code, rem, reset, retry, nw0, nw1 = ALG[0](L, P, B, false, 0, 0, 0, c, t, (gd - gd % 65536) / 65536)
          end
        elseif last >= 0 then
          if last > t then t = last end
          code, rem, reset, retry, nw0, nw1 = ALG[alg](L, P, B, true, w0, w1, last, c, t, (gd - gd % 65536) / 65536)
        else
          code, rem, reset, retry, nw0, nw1 = ALG[alg](L, P, B, false, 0, 0, 0, c, t, (gd - gd % 65536) / 65536)
        end
        if code == ALLOW and c > 0 then
          if u then
            local v
            if alg == 5 then v = encodeLog(nw0) else v = spack('<ddd', nw0, nw1, t) end
            MS[ms + 1], MS[ms + 2] = KEYS[i], v
            ms = ms + 2
            local a = xbase + reset
            local r = a % 1000
            if r > 0 then a = a - r + 1000 end
            local text = XTEXT[a]
            if not (text and reset > 0 and reset % 1 == 0) then text = expiryText(i, reset) end
            nx = nx + 1
            XX[nx] = text
          else
            W0[s], W1[s], WL[s] = nw0, nw1, t
            LOG[s] = alg == 5
            if not TTL[s] then
              nd = nd + 1
              dirty[nd] = s
            end
            TTL[s] = reset
          end
        else
          if first and not u then store(s, alg, w0, w1, last) end
          if code ~= ALLOW and code ~= UNREADABLE then
            -- a sliding log's entries: the reply carries numbers only
            if u then
              if alg == 5 then w0 = 0 end
            elseif LOG[s] then w0 = 0 end
            tail[nt + 1], tail[nt + 2], tail[nt + 3] = w0 or 0, w1 or 0, last
            nt = nt + 3
          end
        end
      end
      if retry == 0 then
        if code == ALLOW and alg == 0 and c > 0 then
          -- a token bucket's admission: one number, as the run's shortcut writes it (nw0 ≥ 0: not in debt)
          out[o + 1] = -1 - nw0
          o = o + 1
        else
          out[o + 1], out[o + 2], out[o + 3] = code, rem, reset
          o = o + 3
        end
      else
        out[o + 1], out[o + 2], out[o + 3] = code + RETRIED, rem, reset
        o = o + 3
        nr = nr + 1
        RT[nr] = retry
      end
      i = i + 1
      if not later then pos = pos + 48 end
    else
      if not LEG then
        LEG = legsOf(ARG4, n)
        -- UNIQUE is for a check of one leg: a group's legs are decided through their keys' slots
        for b = 1, 6 * n, 6 do
          LEG[b] = LEG[b] % UNIQUE
        end
      end
      local all, unreadable = true, false
      for j = i, i + g - 1 do
        local bj = j * 6 - 6
        local gj = LEG[bj + 6]
        local code, rem, reset, retry, nw0, nw1, t, s = evaluate(j, bj, LEG[bj + 5], (gj - gj % 65536) / 65536)
        local oj = j * 4 - 4
        GO[oj + 1], GO[oj + 2], GO[oj + 3], GO[oj + 4] = code, rem, reset, retry
        X0[j], X1[j], XT[j], XS[j] = nw0, nw1, t, s
        if code ~= ALLOW then
          all = false
          if code == UNREADABLE then unreadable = true end
        end
      end
      for j = i, i + g - 1 do
        local oj = j * 4 - 4
        if unreadable then
          GO[oj + 1], GO[oj + 2], GO[oj + 3], GO[oj + 4] = UNREADABLE, 0, 0, 0
        elseif all then
          local s = XS[j]
          if s then commit(s, X0[j], X1[j], XT[j], GO[oj + 3], LEG[j * 6 - 5]) end
        else
          local bj = j * 6 - 6
          if GO[oj + 1] == ALLOW then
            -- this leg alone would admit, but the check is denied: report its state untouched
            GO[oj + 1], GO[oj + 2], GO[oj + 3], GO[oj + 4] = evaluate(j, bj, 0, 0)
          end
          keep(j, bj)
        end
      end
      for j = i, i + g - 1 do
        local oj = j * 4 - 4
        local code, retry = GO[oj + 1], GO[oj + 4]
        if retry ~= 0 then
          code = code + RETRIED
          nr = nr + 1
          RT[nr] = retry
        end
        out[o + 1], out[o + 2], out[o + 3] = code, GO[oj + 2], GO[oj + 3]
        o = o + 3
      end
      i = i + g
      pos = pos + 48 * g
    end
  end
end
-- The written states go out in one MSET (512 arguments a call: unpack's stack), then each key's expiry by
-- its own PEXPIREAT: a SET with an expiry per key cost Redis ~2 k instructions more per key (callgrind,
-- bench/README.md: each call's own overhead, its status reply made into a Lua table). The script is atomic:
-- nobody sees a state between its MSET and its expiry. Unique keys' states and expiries were queued as they
-- were decided; the slots' go after them.
for k = 1, nd do
  local s = dirty[k]
  local v
  if LOG[s] then v = encodeLog(W0[s]) else v = spack('<ddd', W0[s], W1[s], WL[s]) end
  nx = nx + 1
  XX[nx] = expiryText(s, TTL[s])
  MS[ms + 1], MS[ms + 2] = KEYS[s], v
  ms = ms + 2
end
local k = 1
while k <= ms do
  local e = k + 511
  if e > ms then e = ms end
  rcall('MSET', unpack(MS, k, e))
  k = e + 1
end
for k = 1, nx do rcall(pe, MS[k + k - 1], XX[k]) end
out[o + 1] = now
local m = o + 1
for k = 1, nr do out[m + k] = RT[k] end
m = m + nr
for k = 1, nt do out[m + k] = tail[k] end
return packReply(out, m + nt)
end
