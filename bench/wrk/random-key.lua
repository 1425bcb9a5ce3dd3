-- wrk script for the sluice bench: GET /v1/check?policy=free&key=k<0..9999>, keys drawn uniformly at random
-- (seeded), like the autocannon runs. The requests are formatted once in init() and cycled, so the per-request
-- Lua work is a table lookup (wrk.format per request costs wrk ~10% of its rate).
-- Usage: wrk -t1 -c100 -d5s --latency -s bench/wrk/random-key.lua http://127.0.0.1:PORT/
local requests = {}
local n = 10000
local i = 0

init = function(args)
  math.randomseed(12345)
  for k = 1, n do
    requests[k] = wrk.format("GET", "/v1/check?policy=free&key=k" .. math.random(0, 9999))
  end
end

request = function()
  i = i % n + 1
  return requests[i]
end
