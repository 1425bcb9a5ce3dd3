-- algorithm: concurrency (src/engine/leases.ts; the same rules as src/engine/lease-table.ts), one key per call.
--   KEYS[1] = the key's leases: a sorted set, member = lease id (12 hex digits), score = expiry (Unix ms). A
--             lease acquired at t with TTL T is held over [t, t + T): members scored at or before now are gone.
--   ARGV[1] = 1: the clock is Redis's TIME; 0: ARGV[2] is the time in Unix ms (lib.lua clockMs)
--   ARGV[3] = op: 1 acquire, 2 release; ARGV[4] = the lease id; ARGV[5] = limit N; ARGV[6] = TTL in ms
-- Acquire returns {code, remaining, retryAfterMs, now}: code 0 allowed (the lease added), 1 denied (retryAfterMs
-- = the expiry that makes room − now), 2 never (N = 0; retryAfterMs −1). Release returns {1 if the key held the
-- lease (removed) else 0, remaining, now}. The key expires with its last lease (PEXPIREAT), so an abandoned
-- key disappears when its last lease expires; everything the script does is one atomic step.
local now = clockMs(ARGV)
local K = KEYS[1]
local N = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', K, '-inf', now)
local held = redis.call('ZCARD', K)
local function rest(h)
  if h >= N then return 0 end
  return N - h
end
if ARGV[3] == '2' then
  local found = redis.call('ZREM', K, ARGV[4])
  return {found, rest(held - found), now}
end
if N == 0 then return {2, 0, -1, now} end
if held >= N then
  -- the (held − N + 1)-th earliest expiry frees the first place (held > N after a reload lowered N)
  local e = redis.call('ZRANGE', K, held - N, held - N, 'WITHSCORES')
  return {1, 0, tonumber(e[2]) - now, now}
end
redis.call('ZADD', K, now + tonumber(ARGV[6]), ARGV[4])
local last = redis.call('ZRANGE', K, -1, -1, 'WITHSCORES')
-- on Redis's clock the key expires at its last lease's expiry, PEXPIREAT with the score as Redis wrote it (no
-- number to format; Redis 7.0 rewrites PEXPIRE into PEXPIREAT with a new argument); else PX = that − now
if ARGV[1] == '1' then
  redis.call('PEXPIREAT', K, last[2])
else
  redis.call('PEXPIRE', K, tonumber(last[2]) - now)
end
return {0, N - held - 1, 0, now}
