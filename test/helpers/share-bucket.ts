import type { Redis } from 'ioredis';

/**
 * A token bucket that honours a region's share hash exactly as the lease <-> regions contract asks of the
 * lease script (items 1-3 of its 2026-12-01 note): (limit, burst) from `<state>:share` (absent: the default
 * share), the level capped at the share's burst, refill only from max(last update, share.at), and `used`
 * counted with HINCRBY. Integer arithmetic in 1/P-token units, so nothing rounds. The region tests use it to
 * hammer regions at the Redis level (no limiter), which shows the share protocol alone never over-admits.
 */
const LUA = `
local tm = redis.call('TIME')
local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
local cost, P = tonumber(ARGV[1]), tonumber(ARGV[2])
local sh = redis.call('HMGET', KEYS[2], 'limit', 'burst', 'at')
local L, B = tonumber(sh[1]), tonumber(sh[2])
if L == nil then L, B = tonumber(ARGV[3]), tonumber(ARGV[4]) end
local at = tonumber(sh[3]) or 0
local st = redis.call('HMGET', KEYS[1], 'lv', 't')
local lv, t = tonumber(st[1]), tonumber(st[2])
if lv == nil then lv, t = B * P, now end
local from = math.max(t, at)
if now > from then lv = lv + (now - from) * L end
if lv > B * P then lv = B * P end
local ok = 0
if lv >= cost * P then
  lv = lv - cost * P
  ok = 1
  redis.call('HINCRBY', KEYS[2], 'used', cost)
end
redis.call('HSET', KEYS[1], 'lv', lv, 't', now)
return ok
`;

/** Spends `cost` tokens of `stateKey` in the region whose Redis `client` is; true when admitted. */
export async function shareBucketSpend(client: Redis, stateKey: string, cost: number, periodMs: number, dflt: { limit: number; burst: number }): Promise<boolean> {
  const r = await client.eval(LUA, 2, stateKey, `${stateKey}:share`, cost, periodMs, dflt.limit, dflt.burst);
  return Number(r) === 1;
}
