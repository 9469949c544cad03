-- A long-lived worker serving a channel: one call runs for the life of the program in a pool
-- state, takes jobs from "jobs" and answers each on the reply channel the job names; the host
-- (or any state) sends jobs and waits for the answers. Closing "jobs" ends the worker.
-- Run: lua examples/channel_worker.lua
local vmpool = require "vmpool"

local pool = vmpool.new { core = 2 }
pool:compile("worker", [[
local vmpool = require "vmpool"
function serve()
  local jobs, served = vmpool.channel("jobs", { capacity = 100 }), 0
  while true do
    local reply_to, n = jobs:pop()          -- waits; nil, "closed" once jobs is closed and drained
    if reply_to == nil then return served end
    local sum = 0
    for i = 1, n do sum = sum + i * i end   -- the work
    vmpool.channel(reply_to):push(n, sum)
    served = served + 1
  end
end
]])

local jobs = vmpool.channel("jobs", { capacity = 100 })
local replies = vmpool.channel("replies")
local worker = pool:submit("worker", "serve")  -- runs until jobs is closed

for n = 1, 5 do jobs:push("replies", n * 1000) end
for _ = 1, 5 do
  local n, sum = replies:pop(10)            -- a timeout, so a dead worker cannot hang us
  print(("sum of squares up to %d: %d"):format(n, sum))
end

jobs:close()                                -- the worker drains what is left, then returns
print("jobs served:", worker:wait())
pool:close()
