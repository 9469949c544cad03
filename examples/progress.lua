-- Progress reporting from a long call: the state reports on a channel while it works, with
-- try_push so that a slow reader never slows the work down (reports are dropped while the channel
-- is full), and the host prints them as they come; the call's result arrives as usual.
-- The same work as a stream (pool:stream) follows: every item is delivered, with backpressure.
-- Run: lua examples/progress.lua
local vmpool = require "vmpool"

local pool = vmpool.new { core = 1 }
pool:compile("work", [[
local vmpool = require "vmpool"
function crunch(steps, channel)
  local progress = vmpool.channel(channel, { capacity = 8 })
  local acc = 0
  for step = 1, steps do
    for i = 1, 20000 do acc = (acc + i * step) % 1000003 end
    progress:try_push(step, steps)          -- never waits: a full channel drops the report
  end
  progress:push(steps, steps)               -- the last one is worth waiting for
  progress:close()                          -- tells the reader no more reports come
  return acc
end
function crunch_stream(steps)
  local acc = 0
  for step = 1, steps do
    for i = 1, 20000 do acc = (acc + i * step) % 1000003 end
    coroutine.yield(step, acc)              -- each item reaches the loop below; waits when 64 are unread
  end
end
]])

local name = "progress-" .. tostring(os.time())
local progress = vmpool.channel(name, { capacity = 8 })
local fut = pool:submit("work", "crunch", 50, name)
local last
repeat
  local step, steps = progress:pop(10)
  if step then
    last = step
    io.write(("\r%3d%%"):format(math.floor(step * 100 / steps)))
  end
until step == nil                           -- nil, "closed": the call closed the channel
print(("\rdone: %d (last report: step %d)"):format(fut:wait(), last or 0))

for step, acc in pool:stream("work", "crunch_stream", 5) do
  print("stream item", step, acc)
end
pool:close()
