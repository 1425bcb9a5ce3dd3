-- Lease mode (consistency: lease): one atomic step on one key's lease state, a HASH under the key's hash tag
-- (src/engine/lease/keys.ts), so a Redis Cluster runs it on the key's own slot. Joined after lib.lua and
-- sliding_window.lua (its swRetry, swRemaining, swReset).
--
--   KEYS[1] = the lease state S, a HASH:
--     x  token_bucket / gcra: the bucket's level in tokens·P (as lib.lua's x); windows: the count of window k,
--        granted leases included
--     t  the time x was last brought up to date (Unix ms)
--     o  outstanding: tokens granted by live leases and not yet reported used or returned
--     k  windows: the index of the window x counts (epoch-aligned, floor(t / P))
--     p  sliding_window: the count of window k − 1
--     n:<id>  one lease: "<count> <expiry ms> <window>" (its outstanding tokens, when it ends, its window)
--     r:<id>  the tokens its instance had spent under it (a running total) at its last report settled here
--   KEYS[2] = S .. ':share' (regions: a HASH limit, burst, used, gen; read only when ARGV[13] is '1')
--   ARGV[1], ARGV[2] = the clock (lib.lua clockMs); ARGV[3] = 'a' acquire (or renew) | 'r' return (end);
--   ARGV[4..7] = algorithm code (0 token bucket, 1 GCRA, 2 fixed window, 3 sliding window), L, P, B;
--   ARGV[8] = the lease id; ARGV[9] = the tokens its instance has spent under that id so far (a running
--             total that never goes down: what it adds since r:<id> is settled, so a report sent twice, by a
--             call the caller gave up on that still ran, is settled once);
--   ARGV[10] = need: the fewest tokens worth granting (0: any); ARGV[11] = want: the most to grant;
--   ARGV[12] = the lease's time to live, in ms; ARGV[13] = '1': the key's limit and burst come from KEYS[2].
--
-- Why this never admits more than one exact limiter (README, "Lease"): the virtual level V = x/P + o moves
-- as one exact bucket's would. A grant moves tokens from x to o (V unchanged); a report of `used` takes them
-- out of o (V drops, after the real spends: later than an exact bucket would, so it refills less, never
-- more); a return moves unused tokens back from o to x (V unchanged); refill runs only while V < B; a lease
-- that expires counts as all used. Windows: a lease never outlives its window (expiry <= the window's end),
-- its whole grant counts in that window from the moment it is granted, and unused tokens come back only
-- into the same window.
--
-- Returns: granted, the lease's outstanding count now, its time to live from now (ms), remaining (tokens
-- left in Redis), retryAfterMs (when nothing was granted although `need` > 0: the time until `need` could
-- be; −1 never), resetAfterMs, leases of other instances found expired (reaped: counted all used), the
-- script's time (ms), tokens returned; then, for a bucket, B·P − x (tokens·P: what the bucket lacks with
-- every outstanding token counted as spent) and the L it refills at (a region's share's L), else 0, 0. The
-- resetAfterMs above counts outstanding tokens as still in the bucket (the virtual level), so it does not
-- move when an instance spends what it holds; the caller works out a decision's reset from the deficit
-- less the tokens it still holds (src/engine/lease/holding.ts resetAfterMs).
local now = clockMs(ARGV)
local op = ARGV[3]
local alg, L, P, B = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local id = 'n:' .. ARGV[8]
local spentTotal, need, want, ttl = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local rid = 'r:' .. ARGV[8]
local S = KEYS[1]
local shared = ARGV[13] == '1'
-- regions: `at`, when the share last changed (Redis ms); the refill starts there (see the bucket's refill)
local shareAt = 0
if shared then
  local sh = redis.call('HMGET', KEYS[2], 'limit', 'burst', 'at')
  if sh[1] then
    L = tonumber(sh[1])
    B = tonumber(sh[2])
    shareAt = tonumber(sh[3]) or 0
  end
end
local bucket = alg <= 1

local all = redis.call('HGETALL', S)
local x, t, o, k, p
local leases = {}
-- the running total last settled for the caller's lease (nil: none recorded)
local reported
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if f == 'x' then x = tonumber(v)
  elseif f == 't' then t = tonumber(v)
  elseif f == 'o' then o = tonumber(v)
  elseif f == 'k' then k = tonumber(v)
  elseif f == 'p' then p = tonumber(v)
  elseif string.sub(f, 1, 2) == 'n:' then
    local c, e, w = string.match(v, '^(%d+) (%d+) (-?%d+)$')
    if not c then return redis.error_reply('sluice lease: malformed lease ' .. f .. ' in ' .. S) end
    leases[f] = { tonumber(c), tonumber(e), tonumber(w) }
  elseif f == rid then reported = tonumber(v)
  end
end

local BP = B * P
local kk = fdiv(now, P)
if x == nil then
  -- a fresh key: a full bucket, an empty window
  if bucket then x = BP else x = 0 end
  t, o, k, p = now, 0, kk, 0
end
o = o or 0
p = p or 0
k = k or kk

-- bring x up to now, with the outstanding tokens as they stood over the elapsed time
if bucket then
  local cap = BP - o * P
  if cap < 0 then cap = 0 end
  if now > t then
    -- a share changed at `at` > t refills only from `at`: the span before it ran at the old rate, unknown
    -- here, so it counts for nothing (never more than the old or the new rate would give)
    local from = t
    if shareAt > from then from = shareAt end
    if x < cap and now > from then
      if L > 0 and now - from >= cdiv(cap - x, L) then x = cap else x = x + (now - from) * L end
    end
    t = now
  end
  -- a share lowered below what the key holds (regions): what is above it leaves
  if x > cap then x = cap end
else
  if now > t then t = now end
  if kk ~= k then
    if alg == 3 and kk == k + 1 then p = x else p = 0 end
    x = 0
    k = kk
  end
end

-- leases past their expiry: their instance is gone or late; every token they held counts as used
local expired, lapsed = 0, 0
for f, l in pairs(leases) do
  if l[2] <= now then
    o = o - l[1]
    lapsed = lapsed + l[1]
    if f ~= id then expired = expired + 1 end
    leases[f] = nil
    redis.call('HDEL', S, f, 'r:' .. string.sub(f, 3))
  end
end
if o < 0 then o = 0 end

-- the caller's report: tokens spent under its lease since the total last settled leave o (they are gone).
-- A lease with no total recorded (none: the running total is its baseline) settles nothing: what it held
-- counts as used when it ends.
local mine = leases[id]
local cnt = 0
local settled = 0
if mine then
  cnt = mine[1]
  if reported then settled = spentTotal - reported end
  if settled < 0 then settled = 0 end
  if settled > cnt then settled = cnt end
  cnt = cnt - settled
  o = o - settled
  -- a window lease granted in an earlier window is over (its expiry was that window's end)
  if not bucket and mine[3] ~= kk then
    o = o - cnt
    cnt = 0
  end
end

local granted, returned, retry = 0, 0, 0
local ends = now + ttl
if not bucket and ends > (kk + 1) * P then ends = (kk + 1) * P end

if op == 'r' then
  returned = cnt
  if bucket then x = x + returned * P else x = x - returned end
  o = o - returned
  cnt = 0
else
  local avail
  if L == 0 then avail = 0
  elseif bucket then avail = fdiv(x, P)
  elseif alg == 2 then avail = L - x
  else
    local e = now - kk * P
    avail = L - x - cdiv(p * (P - e), P)
  end
  if avail < 0 then avail = 0 end
  -- while other instances hold leases of this key, one caller takes at most half of what is left
  local others = false
  for f, _ in pairs(leases) do if f ~= id then others = true end end
  if others then
    local half = fdiv(avail, 2)
    if want > half then want = half end
  end
  if want < need then want = need end
  if need <= avail then
    granted = want
    if granted > avail then granted = avail end
  end
  if granted > 0 then
    if bucket then x = x - granted * P else x = x + granted end
    o = o + granted
    cnt = cnt + granted
  elseif need > 0 then
    if L == 0 or (bucket and need > B) or (not bucket and need > L) then retry = -1
    elseif bucket then retry = cdiv(need * P - x, L)
    elseif alg == 2 then retry = (kk + 1) * P - now
    else retry = swRetry(P, L, now - kk * P, p, x, need) end
    -- other instances hold leases: their unused tokens may come back sooner (returned, or at the latest
    -- counted at their expiry, after which a new grant is possible): ask again by the first expiry
    if retry > 0 then
      for f, l in pairs(leases) do
        if f ~= id and l[2] - now < retry then retry = l[2] - now end
      end
    end
  end
end

if cnt > 0 then
  redis.call('HSET', S, id, string.format('%.0f %.0f %.0f', cnt, ends, kk), rid, string.format('%.0f', spentTotal))
elseif mine or reported then
  redis.call('HDEL', S, id, rid)
end

local remaining, reset
if bucket then
  remaining = fdiv(x, P)
  if L > 0 then reset = cdiv(BP - x - o * P, L) else reset = 0 end
  if reset < 0 then reset = 0 end
elseif alg == 2 then
  remaining = L - x
  reset = (kk + 1) * P - now
else
  remaining = swRemaining(L, P, x, p * (P - (now - kk * P)))
  reset = swReset(P, kk, now, p, x)
end
if remaining < 0 then remaining = 0 end

redis.call('HSET', S, 'x', x, 't', t, 'o', o, 'k', k, 'p', p)
-- the state carries information until every lease has ended and then the bucket is full again (or the
-- window, and for a sliding window the next one, is over)
local keep = ttl
if bucket then
  if L > 0 then keep = ttl + cdiv(BP, L) end
elseif alg == 2 then keep = (kk + 1) * P - now
else keep = (kk + 2) * P - now end
if keep < ttl then keep = ttl end
-- on Redis's clock absolute, PEXPIREAT now + keep + 1 (Redis 7.0 rewrites PEXPIRE into it with a new
-- argument), as decimal text (a number argument costs Redis a printf('%.17g')); else relative
if ARGV[1] == '1' and keep % 1 == 0 then
  redis.call('PEXPIREAT', S, string.format('%d', now + keep + 1))
else
  redis.call('PEXPIRE', S, keep + 1)
end
if shared and settled + lapsed > 0 then redis.call('HINCRBY', KEYS[2], 'used', settled + lapsed) end

local deficit, rate = 0, 0
if bucket then deficit, rate = BP - x, L end
return { granted, cnt, ends - now, remaining, retry, reset, expired, now, returned, deficit, rate }
