-- Runs a function in a forked child process (lua-posix: Debian ships it for Lua 5.1 to 5.3 and LuaJIT)
-- and reports what it returned and how it exited. The child never returns into busted: it
-- _exit()s. A child still running after the timeout is killed and reported as "hung".
local socket = require "socket"
local ok, P = pcall(require, "posix")

local Child = { available = ok and type(P) == "table" and type(P.fork) == "function" }

-- Returns report (the string `body` returned, or its error), how ("exited", "killed", "hung")
-- and the exit code.
function Child.run(body, timeout)
  local r, w = P.pipe()
  local pid = assert(P.fork())
  if pid == 0 then
    P.close(r)
    local fine, report = pcall(body)
    P.write(w, fine and tostring(report) or ("child failed: " .. tostring(report)))
    P.close(w)
    P._exit(fine and 0 or 1)
  end
  P.close(w)
  local deadline = socket.gettime() + (timeout or 10)
  local how, code
  repeat
    local got
    got, how, code = P.wait(pid, P.WNOHANG)
    if got == pid then break end
    how = nil
    socket.sleep(0.002)
  until socket.gettime() > deadline
  if not how then
    P.kill(pid, P.SIGKILL)
    P.wait(pid)
    how = "hung"
  end
  local chunks = {}
  repeat
    local s = P.read(r, 4096)
    chunks[#chunks + 1] = s
  until not s or s == ""
  P.close(r)
  return table.concat(chunks), how, code
end

-- Child.run's shape for `source` (the body of a function returning the report, with `vmpool`,
-- `Child` and `Gate` in scope) run in a fresh interpreter. For cases that cap the address space so
-- that no thread can start: a fork of a process with threads (busted's, holding earlier specs'
-- pools) inherits their stacks in the C library's stack cache, and a new thread reuses one without
-- mapping memory, so threads would start in the capped child after all.
function Child.run_fresh(source, timeout)
  local Sub = require "spec.support.subprocess"
  local out, status, bound = Sub.run(([[
local vmpool = require "vmpool"
local Child = require "spec.support.child"
local Gate = require "spec.support.gate"
local fine, report = pcall(function() %s end)
io.write(fine and tostring(report) or ("child failed: " .. tostring(report)))
os.exit(fine and 0 or 1)
]]):format(source), { timeout = timeout or 10 })
  if bound then return out, "hung", 0 end
  if status > 128 then return out, "killed", status - 128 end
  return out, "exited", status
end

-- The parent's pid (to match in "created in another process (pid N)").
function Child.pid()
  return P.getpid("pid")
end

-- Caps this process's address space at its current size plus `extra` bytes (in a child only:
-- new thread stacks then cannot be mapped), or lifts the cap again with `nil`.
function Child.cap_address_space(extra)
  if not extra then
    assert(P.setrlimit("as", -1, -1))
    return
  end
  local f = assert(io.open("/proc/self/status"))
  local vm = tonumber(f:read("*a"):match("VmSize:%s*(%d+)")) * 1024
  f:close()
  assert(P.setrlimit("as", vm + extra, -1))
end

return Child
