--- A model-based stress test of channels across the host and 8 pool states: producers and
-- consumers in states (4 + 4) and in coroutines of vmpool.run (2 + 2), each operation chosen at
-- random (push, push_timeout, try_push; pop(t), try_pop, select(t)), over three small channels,
-- one of which a host coroutine closes midway. The model: a producer's accepted messages are its
-- sequence numbers 1..k (it stops at "closed"); every one is delivered exactly once (count, sum
-- and sum of squares per producer), and each consumer sees each producer's numbers in order.
-- VMPOOL_CHANNEL_MESSAGES sets the messages the producers try to send in all (default 12,000;
-- the 1,000,000 run: VMPOOL_CHANNEL_MESSAGES=1000000 busted spec/channel_model_spec.lua).
local vmpool = require "vmpool"

local TOTAL = tonumber(os.getenv("VMPOOL_CHANNEL_MESSAGES")) or 12000
local PRODUCERS = 6 -- 4 in states, 2 in the host
local PER = math.floor(TOTAL / PRODUCERS)

local CHUNK = [[
local vmpool = require "vmpool"
local function rng(seed)
  local x = seed
  return function(n) x = (x * 1103515245 + 12345) % 2147483648 return x % n end
end
-- pushes id's messages 1..per onto `names[ch]` (closing it before message `close_at`, if
-- given); returns how many were accepted
function produce(id, names, ch, per, seed, close_at)
  local c, r, seq = vmpool.channel(names[ch]), rng(seed), 1
  while seq <= per do
    if seq == close_at then c:close() end
    local k, ok, why = r(3)
    if k == 0 then ok, why = c:try_push(id, seq)
    elseif k == 1 then ok, why = c:push_timeout(r(3) / 1000, id, seq)
    else ok, why = c:push(id, seq) end
    if ok then seq = seq + 1
    elseif why == "closed" then break end
  end
  return seq - 1
end
-- takes messages until every channel is closed and drained; returns per producer: count, sum,
-- sum of squares (and raises if a producer's numbers came out of order)
function consume(names, seed)
  local chans = {}
  for i, n in ipairs(names) do chans[i] = vmpool.channel(n) end
  local r, last, stats = rng(seed), {}, {}
  local function take(id, seq)
    if id == nil then return end
    assert((last[id] or 0) < seq, "producer " .. id .. "'s " .. seq .. " after " .. tostring(last[id]))
    last[id] = seq
    local s = stats[id] or { 0, 0, 0 }
    stats[id] = s
    s[1], s[2], s[3] = s[1] + 1, s[2] + seq, s[3] + seq * seq
  end
  while true do
    local k = r(3)
    if k == 0 then take(chans[r(#chans) + 1]:try_pop())
    elseif k == 1 then take(chans[r(#chans) + 1]:pop(r(3) / 1000))
    else
      local ch, id, seq = vmpool.select(chans, r(5) / 1000)
      if ch then take(id, seq) elseif id == "closed" then return stats end
    end
  end
end
]]

describe("channels between the host and 8 states under random operations", function()
  it("deliver every accepted message exactly once, in order per producer", function()
    local pool = vmpool.new { core = 8 }
    pool:compile("m", CHUNK)
    local run = tostring(os.time()) .. "-" .. tostring(math.random(1e9))
    local names = { "model-a-" .. run, "model-b-" .. run, "model-c-" .. run }
    local chans = {
      vmpool.channel(names[1], { capacity = 3 }),
      vmpool.channel(names[2], { capacity = 8, bytes = 64 }),
      vmpool.channel(names[3], { capacity = 32 }),
    }
    -- the same functions in the host (loading the chunk defines them as globals here too)
    local load_text = loadstring or load -- luacheck: ignore 113
    local produce, consume = assert(load_text(CHUNK .. "\nreturn produce, consume"))()
    local accepted, stats = {}, {}
    vmpool.run(function()
      local producers_left = PRODUCERS
      local function produced(id, k)
        accepted[id] = k
        producers_left = producers_left - 1
        if producers_left == 0 then
          for _, c in ipairs(chans) do c:close() end
        end
      end
      for id = 1, 4 do
        vmpool.spawn(function()
          produced(id, pool:co_invoke("m", "produce", id, names, (id - 1) % 3 + 1, PER, id * 7919))
        end)
      end
      -- producer 6 closes channel c (its own and producer 3's) a third of the way: both stop there
      for id = 5, 6 do
        local close_at = id == 6 and math.floor(PER / 3) or nil
        vmpool.spawn(function()
          produced(id, produce(id, names, (id - 1) % 3 + 1, PER, id * 104729, close_at))
        end)
      end
      for k = 1, 4 do
        vmpool.spawn(function()
          local got = pool:co_invoke("m", "consume", names, k * 31337) -- (before #stats is read)
          stats[#stats + 1] = got
        end)
      end
      for k = 1, 2 do
        vmpool.spawn(function()
          local got = consume(names, k * 4241)
          stats[#stats + 1] = got
        end)
      end
    end)
    pool:close()
    _G.produce, _G.consume = nil, nil
    assert.are.equal(6, #stats)
    local delivered = 0
    for id = 1, PRODUCERS do
      local k = accepted[id]
      local n, sum, sq = 0, 0, 0
      for _, s in ipairs(stats) do
        local p = s[id]
        if p then n, sum, sq = n + p[1], sum + p[2], sq + p[3] end
      end
      delivered = delivered + n
      assert.are.equal(k, n, "producer " .. id .. ": accepted " .. k .. ", delivered " .. n)
      assert.are.equal(k * (k + 1) / 2, sum, "producer " .. id .. ": the sum")
      assert.are.equal(k * (k + 1) * (2 * k + 1) / 6, sq, "producer " .. id .. ": the sum of squares")
    end
    assert.is_true(delivered >= PER * 4)
  end)
end)
