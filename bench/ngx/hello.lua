-- The work every endpoint of the benchmark does: the seed report's helloLua (examples/demo.lua).
-- Loaded three ways: as a module in the request (/inline), by ngx.run_worker_thread's thread VMs
-- (/run_worker_thread) and as the source of a vmpool chunk (/vmpool).
local M = {}

function M.goSayHello(greeting, text)
  return greeting .. ", " .. text
end

function M.helloLua(n)
  M.goSayHello("hello", "my name is lua")
  return n, 100000
end

return M
