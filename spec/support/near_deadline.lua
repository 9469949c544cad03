-- Calls that end around their deadline, for the specs that check no hook outlives its call: `near(s)`
-- busy-loops s seconds of CPU time and returns whether it started without a hook; `durations(n)`
-- gives n durations from 0 to twice LIMIT (every third 0), so some calls end just before their
-- deadline fires and the watchdog's hook (or signal, Lua 5.4 and 5.5) may arrive after them.
local M = { LIMIT = 0.005 }

M.SOURCE = [[
  function near(s)
    local clean = debug.gethook() == nil
    local t = os.clock() + s
    while os.clock() < t do end
    return clean
  end
]]

function M.durations(n)
  local d = {}
  for i = 1, n do d[i] = (i % 3 == 0) and 0 or (i % 20) / 10 * M.LIMIT end
  return d
end

return M
