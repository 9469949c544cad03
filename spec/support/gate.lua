-- A gate that pool states block on until the test opens it, and that tells the test when a state
-- has arrived: a TCP listener on 127.0.0.1. A child call `gate(port)` connects and waits for one
-- byte; the test accepts the connection (so it knows the state is inside the call) and sends the
-- byte to let it go. Every wait is bounded: nothing sleeps for "probably long enough".
local socket = require "socket"

local Gate = {}
Gate.__index = Gate

-- Source for a pool's `init`: defines gate(port) in every state.
Gate.CHILD = [[
local socket = require "socket"
function gate(port, ...)
  local c = assert(socket.connect("127.0.0.1", port))
  c:settimeout(30)
  local byte, err = c:receive(1)
  c:close()
  if not byte then error("gate: " .. tostring(err)) end
  return ...
end
-- Like gate, but lets the call go by itself after `seconds` (for tests where the host thread
-- itself is blocked, e.g. in close()).
function hold(port, seconds, ...)
  local c = assert(socket.connect("127.0.0.1", port))
  c:settimeout(seconds)
  c:receive(1)
  c:close()
  return ...
end
]]

function Gate.new()
  local server = assert(socket.bind("127.0.0.1", 0))
  local _, port = server:getsockname()
  return setmetatable({ server = server, port = tonumber(port), waiting = {} }, Gate)
end

-- Waits (at most `timeout` seconds, default 10) until `n` more states have entered the gate.
function Gate:arrivals(n, timeout)
  local deadline = socket.gettime() + (timeout or 10)
  for _ = 1, n or 1 do
    local left = deadline - socket.gettime()
    assert(left > 0, "gate: timed out waiting for a state to arrive")
    self.server:settimeout(left)
    local c = assert(self.server:accept())
    self.waiting[#self.waiting + 1] = c
  end
end

-- Lets `n` (default: all) arrived states go, oldest first.
function Gate:release(n)
  n = n or #self.waiting
  for _ = 1, n do
    local c = table.remove(self.waiting, 1)
    assert(c, "gate: no state is waiting")
    c:send("x")
    c:close()
  end
end

function Gate:close()
  self:release()
  self.server:close()
end

-- Polls `cond()` until it is true or `timeout` seconds pass (for state changes only visible
-- through stats(), e.g. the idle check closing a state). Returns the last value of `cond()`.
function Gate.eventually(cond, timeout)
  local deadline = socket.gettime() + (timeout or 10)
  repeat
    local v = cond()
    if v then return v end
    socket.sleep(0.002)
  until socket.gettime() > deadline
  return cond()
end

-- Threads of this process (Linux), to check that closed pools leave none behind.
function Gate.threads()
  local f = assert(io.open("/proc/self/status"))
  local n = f:read("*a"):match("Threads:%s*(%d+)")
  f:close()
  return tonumber(n)
end

-- The thread count once it is back to `n`, or after `timeout` seconds (default 10) if it never
-- gets there. A thread that pthread_join has returned for can still be counted for a moment: the
-- kernel lets the joiner go before it removes the thread.
function Gate.threads_back_to(n, timeout)
  return Gate.eventually(function()
    local now = Gate.threads()
    return now <= n and now
  end, timeout) or Gate.threads()
end

-- The threads of this process (Linux) by id: { [tid] = name }. What a test compares before and
-- after a pool lives, rather than counts: a count taken while an earlier test's joined thread
-- is still being removed by the kernel (see threads_back_to) is one too high, and a later count
-- then looks like one thread too few.
function Gate.thread_ids()
  local stat = assert(io.open("/proc/self/stat"))
  local pid = stat:read("*l"):match("^(%d+)")
  stat:close()
  local dir = "/proc/" .. pid .. "/task"
  local ls = assert(io.popen("ls " .. dir))
  local ids = {}
  for tid in ls:lines() do
    local f = io.open(dir .. "/" .. tid .. "/comm")
    if f then -- (gone meanwhile otherwise)
      ids[tid] = f:read("*l")
      f:close()
    end
  end
  ls:close()
  return ids
end

-- The threads alive now that were not in `before` (a table of Gate.thread_ids()), as a sorted
-- list of "tid name".
function Gate.new_threads(before)
  local list = {}
  for tid, name in pairs(Gate.thread_ids()) do
    if before[tid] == nil then list[#list + 1] = tid .. " " .. tostring(name) end
  end
  table.sort(list)
  return list
end

-- The threads not in `before` that are still alive once none is, or after `timeout` seconds
-- (default 10): an empty list when every thread started since `before` has gone.
function Gate.threads_left(before, timeout)
  return Gate.eventually(function()
    local left = Gate.new_threads(before)
    return #left == 0 and left
  end, timeout) or Gate.new_threads(before)
end

return Gate
