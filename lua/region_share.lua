-- A region's share of one limit of a `scope: global` policy, in the REGION's Redis (the lease <-> regions
-- contract): HASH <lease state key>:share with
--   limit, burst  the region's share (tokens per period, bucket capacity), written here only
--   at            Redis ms of the last change of limit/burst: the lease script refills only from then on
--   gen           bumped on every change
--   used          tokens the lease script settled as used here (HINCRBY by the lease script)
-- A hash without `limit` holds the default share (ARGV[2], ARGV[3]): the lease script reads it so too.
-- No TTL: a share lowered below the default must never fall back to it while another region holds what it gave.
--
-- KEYS[1] = the share hash, KEYS[2] = the lease state S (lua/lease.lua; its `o`: tokens out in leases)
-- ARGV[1] = op: 'read' | 'lower' | 'raise'; ARGV[2] = P, the period in ms
-- ARGV[3], ARGV[4] = the default share (limit, burst)
-- lower: ARGV[5], ARGV[6] = tokens of limit and burst to give, ARGV[7], ARGV[8] = the floor of limit and burst
--   (burst never goes below S's `o`, the tokens out in leases: they stay spendable); returns what was freed
-- raise: ARGV[5], ARGV[6] = tokens of limit and burst to add (already taken from the global pool)
-- Returns { limit, burst, used, out, gen, now ms, freed or added limit, freed or added burst, free }: free is
-- what the region's bucket holds now (S's level brought up to now as lua/lease.lua would; the whole burst
-- for a key S does not hold yet), read before a change.
local k = KEYS[1]
local op = ARGV[1]
local P = tonumber(ARGV[2])
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local h = redis.call('HMGET', k, 'limit', 'burst', 'used', 'gen', 'at')
local limit, burst = tonumber(h[1]), tonumber(h[2])
if limit == nil then limit, burst = tonumber(ARGV[3]), tonumber(ARGV[4]) end
local used, gen, at = tonumber(h[3]) or 0, tonumber(h[4]) or 0, tonumber(h[5]) or 0
local st = redis.call('HMGET', KEYS[2], 'x', 't', 'o')
local x, t, out = tonumber(st[1]), tonumber(st[2]), tonumber(st[3]) or 0
if out < 0 then out = 0 end
local free = burst
if x ~= nil then
  local cap = (burst - out) * P
  local from = math.max(t or now, at)
  if x < cap and now > from then x = math.min(cap, x + (now - from) * limit) end
  if x > cap then x = cap end
  free = math.max(0, math.floor(x / P))
end
local dl, db = 0, 0
if op == 'lower' then
  local nl = math.max(tonumber(ARGV[7]), limit - tonumber(ARGV[5]))
  local nb = math.max(tonumber(ARGV[8]), out, burst - tonumber(ARGV[6]))
  if nl > limit then nl = limit end
  if nb > burst then nb = burst end
  dl, db = limit - nl, burst - nb
  if dl > 0 or db > 0 then
    gen = gen + 1
    limit, burst = nl, nb
    redis.call('HSET', k, 'limit', limit, 'burst', burst, 'at', now, 'gen', gen)
  end
elseif op == 'raise' then
  dl, db = tonumber(ARGV[5]), tonumber(ARGV[6])
  if dl > 0 or db > 0 then
    gen = gen + 1
    limit, burst = limit + dl, burst + db
    redis.call('HSET', k, 'limit', limit, 'burst', burst, 'at', now, 'gen', gen)
  end
elseif op ~= 'read' then
  return redis.error_reply('region_share: unknown op ' .. tostring(op))
end
return { limit, burst, used, out, gen, now, dl, db, free }
