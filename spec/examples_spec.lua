--- The examples run as the README shows them, each in a fresh interpreter, and print what
-- their comments say.
local Sub = require "spec.support.subprocess"

local function run_example(path)
  local out, status, killed = Sub.run(("dofile(%q)"):format(path), { timeout = 60 })
  assert.is_false(killed, path .. " hung: " .. out)
  assert.are.equal(0, status, out)
  return out
end

describe("examples", function()
  it("demo.lua (make demo): every strategy completes its calls, then the default pool's stats print", function()
    local out = run_example("examples/demo.lua")
    assert.matches("pool:invoke('test.lua', 'helloLua', 42) ->\t42\t100000\n", out, 1, true)
    assert.matches("a missing function ->\tfalse\tvmpool: chunk 'test.lua' has no function 'nope'", out, 1, true)
    assert.matches("no pool %(a new state per call%)%s+%d+ calls/s   states: core 0, non%-core 0, "
      .. "created 2000, closed 2000\n", out)
    assert.matches("core 4 %+ blocking%s+%d+ calls/s   states: core 4, non%-core 0, created 4, closed 0\n", out)
    assert.matches("\n  invokes       20000\n", out, 1, true)
    assert.matches("\n  succeeded     20000\n", out, 1, true)
    assert.matches("\n  wait          20000 calls, p50 [%d.]+ us, p99 [%d.]+ us, max [%d.]+ us\n", out)
    assert.matches("\n  run           20000 calls, p50 [%d.]+ us", out)
  end)

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
