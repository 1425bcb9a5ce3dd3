-- One limit of a `scope: global` key in the GLOBAL Redis: what every region holds and the pool of share no
-- region holds. HASH <lease state key>:global with
--   pl, pb        the pool: tokens of limit and burst no region holds
--   l:<r>, b:<r>  the share region r holds as far as this hash knows (a region's own Redis may hold less, while
--                 a give is under way or after a raise that failed; never more)
--   u:<r>, t:<r>  region r's usage (tokens per period) at its last report, and when (Redis ms)
--   s:<r>         1 when region r ran short at its last report
-- Invariant: pl + sum of l:<r> = L and pb + sum of b:<r> = B, so the regions' shares never add up to more than
-- the limit. Created on the first report with every region at its default share, the rounding remainder in
-- the pool.
--
-- KEYS[1] = the hash
-- ARGV: region, actual limit, actual burst (what the region's Redis holds), usage (tokens per period),
--       short (1: the region runs short), L, B, mode (0 fixed, 1 adaptive, 2 settle only: after a give, no new move), stale ms, min limit,
--       min burst, n, then n region names, n default limits, n default bursts
-- Returns { take limit, take burst, give limit, give burst, pool limit, pool burst, sum of fresh usage,
--           sum of held limits, now }: take is already moved from the pool to the region here (raise it in
--           the region's Redis); give is what the region should lower in its own Redis, then report again.
local k = KEYS[1]
local me, al, ab, u, short = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5] == '1'
local L, B, mode, stale = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local minl, minb, n = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local names = {}
for i = 1, n do names[i] = ARGV[12 + i] end
local function cdiv(a, b) return math.ceil(a / b) end
local function fdiv(a, b) return math.floor(a / b) end

if redis.call('EXISTS', k) == 0 then
  local sl, sb = 0, 0
  local init = {}
  for i = 1, n do
    local dl, db = tonumber(ARGV[12 + n + i]), tonumber(ARGV[12 + 2 * n + i])
    sl, sb = sl + dl, sb + db
    init[#init + 1] = 'l:' .. names[i]; init[#init + 1] = dl
    init[#init + 1] = 'b:' .. names[i]; init[#init + 1] = db
  end
  init[#init + 1] = 'pl'; init[#init + 1] = L - sl
  init[#init + 1] = 'pb'; init[#init + 1] = B - sb
  redis.call('HSET', k, unpack(init))
end

local pl = tonumber(redis.call('HGET', k, 'pl'))
local pb = tonumber(redis.call('HGET', k, 'pb'))
local rl = tonumber(redis.call('HGET', k, 'l:' .. me)) or 0
local rb = tonumber(redis.call('HGET', k, 'b:' .. me)) or 0
-- the region holds less than recorded (a give done, or a raise that never happened): back to the pool
if al < rl then pl = pl + (rl - al); rl = al end
if ab < rb then pb = pb + (rb - ab); rb = ab end
-- it holds more (this hash was lost and started again from the defaults): cover it from the pool, or have
-- the region give the rest back at once
local give_l, give_b, take_l, take_b = 0, 0, 0, 0
if al > rl then local t = math.min(pl, al - rl); pl = pl - t; rl = rl + t; give_l = al - rl end
if ab > rb then local t = math.min(pb, ab - rb); pb = pb - t; rb = rb + t; give_b = ab - rb end

-- the other regions' latest reports
local fresh_u, held = u, 0
local others_short, others_want = false, 0
for i = 1, n do
  local r = names[i]
  if r ~= me then
    local f = redis.call('HMGET', k, 'l:' .. r, 'u:' .. r, 't:' .. r, 's:' .. r)
    local l, ru, rt = tonumber(f[1]) or 0, tonumber(f[2]) or 0, tonumber(f[3]) or 0
    held = held + l
    if now - rt <= stale then
      fresh_u = fresh_u + ru
      if f[4] == '1' then others_short = true; others_want = others_want + math.max(cdiv(l, 4), cdiv(L, 20), 1) end
    end
  end
end

if mode == 1 and give_l == 0 and give_b == 0 then
  if short then
    -- short: take from the pool, a quarter of its share (at least 1/20 of the limit) at a time
    local want = math.max(cdiv(rl, 4), cdiv(L, 20), 1)
    take_l = math.min(pl, want)
    take_b = math.min(pb, math.max(fdiv(take_l * B, L), take_l > 0 and 1 or 0))
    if take_b > pb then take_b = pb end
  elseif others_short and pl < others_want then
    -- another region runs short and the pool cannot cover it: give what this one does not use (keep 1.5x
    -- its usage, and at least the floor)
    local keep = math.max(minl, cdiv(u * 3, 2))
    if rl > keep then
      give_l = rl - keep
      give_b = math.max(0, math.min(rb - minb, fdiv(give_l * B, L)))
    end
  end
end
pl, pb = pl - take_l, pb - take_b
rl, rb = rl + take_l, rb + take_b
held = held + rl
redis.call('HSET', k, 'pl', pl, 'pb', pb, 'l:' .. me, rl, 'b:' .. me, rb, 'u:' .. me, u, 't:' .. me, now, 's:' .. me, short and 1 or 0)
redis.call('PEXPIRE', k, '86400000') -- as text: a number argument costs Redis a printf('%.17g')
return { take_l, take_b, give_l, give_b, pl, pb, fresh_u, held, now }
