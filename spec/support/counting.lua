--- A pool of one state for tests that must tell how often each call ran: `count(tag)` adds one
-- to `tag` in the vmpool.shared dictionary `name` and returns the new count; `echo(...)` returns
-- its arguments. Returns the pool and the dictionary.
local vmpool = require "vmpool"

return function(name)
  local pool = vmpool.new { core = 1, max_noncore = 0 }
  pool:compile("c", ([[
    local d = require("vmpool").shared(%q)
    function count(tag) return d:incr(tag, 1, 0) end
    function echo(...) return ... end
  ]]):format(name))
  return pool, vmpool.shared(name)
end
