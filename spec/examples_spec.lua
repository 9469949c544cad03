--- The channel examples run as the README shows them, each in a fresh interpreter, and print what
-- their comments say.
local Sub = require "spec.support.subprocess"

local function run_example(path)
  local out, status, killed = Sub.run(("dofile(%q)"):format(path), { timeout = 60 })
  assert.is_false(killed, path .. " hung: " .. out)
  assert.are.equal(0, status, out)
  return out
end

describe("examples", function()
  it("channel_worker.lua: a long-lived worker answers every job, then ends when its channel closes", function()
    local out = run_example("examples/channel_worker.lua")
    assert.matches("sum of squares up to 1000: 333833500\n", out, 1, true)
    assert.matches("sum of squares up to 5000: 41679167500\n", out, 1, true)
    assert.matches("jobs served:\t5\n", out, 1, true)
  end)

  it("progress.lua: reports arrive while the call runs, the last one always, then the stream's items", function()
    local out = run_example("examples/progress.lua")
    assert.matches("done: 984967 (last report: step 50)", out, 1, true)
    assert.matches("stream item\t5\t141000\n", out, 1, true)
  end)
end)
