-- pool:stats()'s latency figures and counters, and vmpool.metrics(): percentiles of calls of known
-- durations within the histogram's bucket error, the exposition read back by a real Prometheus
-- parser (spec/support/prometheus.lua) on every runtime. No assertion rests on how fast the machine
-- is: each figure is bounded below by what the state itself measured and above by what the host
-- measured around the call, widened by the bucket width (1/32) and the clock's calibration.
local vmpool = require "vmpool"
local Gate = require "spec.support.gate"
local P = require "spec.support.prometheus"

-- a bucket's top is at most 1/32 above the value; the clocks agree to 1e-3 (and 5 µs)
local function at_most(bound)
  return bound * (1 + 1 / 32) * 1.001 + 5e-6
end
local function at_least(bound)
  return bound * 0.999 - 5e-6
end

local TIMED = [[
local socket = require "socket"
local clock = require("vmpool").clock
-- sleeps `s` seconds; returns how long it slept as the state measured it
function nap(s)
  local t0 = clock()
  socket.sleep(s)
  return clock() - t0
end
-- returns when this call started and ended, on vmpool.clock
function span(s)
  local t0 = clock()
  if s > 0 then socket.sleep(s) end
  return t0, clock()
end
function boom() error("boom") end
function spin() while true do end end
function hog() local t = {} for i = 1, 1e8 do t[i] = ("x"):rep(64) .. i end end
]] .. Gate.CHILD

local function sorted(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  return c
end

describe("pool:stats() latency figures", function()
  it("put p50, p90, p99 and p999 of calls sleeping 1, 10 and 100 ms within a bucket of the true values", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("t", TIMED)
    local sleeps = {}
    for _ = 1, 60 do sleeps[#sleeps + 1] = 0.001 end
    for _ = 1, 30 do sleeps[#sleeps + 1] = 0.010 end
    for _ = 1, 10 do sleeps[#sleeps + 1] = 0.100 end
    local inner, outer = {}, {}
    for i, s in ipairs(sleeps) do
      local t0 = vmpool.clock()
      inner[i] = pool:invoke("t", "nap", s)
      outer[i] = vmpool.clock() - t0
      assert.is_true(inner[i] >= s)
    end
    local run = pool:stats().run
    pool:close()
    assert.are.equal(100, run.count)
    inner, outer = sorted(inner), sorted(outer)
    -- rank ceil(q * 100): each call ran at least its inner time and at most its host time
    local ranks = {
      { "p50", 50, 0.001 }, { "p90", 90, 0.010 }, { "p99", 99, 0.100 }, { "p999", 100, 0.100 }, { "max", 100, 0.100 },
    }
    for _, q in ipairs(ranks) do
      local field, rank, sleep = q[1], q[2], q[3]
      local p = run[field]
      assert.is_true(p >= sleep, field .. " = " .. p .. " is below the sleep of its rank, " .. sleep)
      assert.is_true(p >= at_least(inner[rank]), field .. " = " .. p .. " < " .. inner[rank] .. " (state)")
      assert.is_true(p <= at_most(outer[rank]), field .. " = " .. p .. " > " .. outer[rank] .. " (host) + a bucket")
    end
    local inner_sum, outer_sum = 0, 0
    for i = 1, 100 do inner_sum, outer_sum = inner_sum + inner[i], outer_sum + outer[i] end
    assert.is_true(run.sum >= at_least(inner_sum) and run.sum <= outer_sum * 1.001 + 1e-4, "sum " .. run.sum)
  end)

  it("measure a queued call's wait from its submission to the state taking it", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("t", TIMED)
    local first = pool:submit("t", "span", 0.1)
    local before = vmpool.clock()
    local second = pool:submit("t", "span", 0)
    local after = vmpool.clock()
    local _, first_end = first:wait()
    local second_start = second:wait()
    local wait = pool:stats().wait
    pool:close()
    assert.are.equal(2, wait.count)
    -- the second call waited at least from its submission (before `after`) to the first call's
    -- end, and at most from `before` to its own start
    local low, high = first_end - after, second_start - before
    -- (low is about 0.1 s unless the host stalled between the submissions; the bounds hold anyway)
    assert.is_true(wait.max >= at_least(low), "wait.max " .. wait.max .. " < " .. low)
    assert.is_true(wait.max <= at_most(high), "wait.max " .. wait.max .. " > " .. high)
    assert.are.equal(wait.max, wait.p999)
    assert.is_true(wait.p50 <= wait.max and wait.sum >= at_least(low))
  end)

  it("start a new interval with reset = true and keep the counters counting", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("t", TIMED)
    for _ = 1, 3 do pool:invoke("t", "nap", 0.002) end
    local first = pool:stats { reset = true }
    assert.are.equal(3, first.run.count)
    assert.are.equal(3, first.wait.count)
    assert.is_true(first.run.p50 >= 0.002)
    local empty = pool:stats()
    for _, name in ipairs { "wait", "run" } do
      for _, field in ipairs { "count", "sum", "max", "p50", "p90", "p99", "p999" } do
        assert.are.equal(0, empty[name][field], name .. "." .. field)
      end
    end
    assert.are.equal(3, empty.succeeded)
    assert.are.equal(0, empty.peak_busy)
    pool:invoke("t", "nap", 0.02)
    local second = pool:stats { reset = false }
    assert.are.equal(1, second.run.count)
    assert.is_true(second.run.p50 >= 0.02 and second.run.max >= 0.02)
    assert.are.equal(4, second.succeeded)
    assert.are.equal(1, second.peak_busy)
    pool:close()
  end)

  it("refuse options other than reset = boolean", function()
    local pool = vmpool.new { core = 1 }
    for _, bad in ipairs { { 1 }, { reset = 1 }, { rest = true } } do
      local ok, err = pcall(pool.stats, pool, bad)
      assert.is_false(ok)
      assert.matches("^vmpool: bad argument #1 to 'stats': ", err)
    end
    local ok, err = pcall(pool.stats, pool, "reset")
    assert.is_false(ok)
    assert.matches("expected an options table, got string", err, 1, true)
    pool:close()
  end)
end)

describe("pool:stats() counters", function()
  it("count every call in exactly one outcome, telling limits apart from other errors", function()
    local pool = vmpool.new { core = 1, time_limit = 0.3, memory_limit = 1024 * 1024, jit = false }
    pool:compile("t", TIMED)
    assert.is_true(pool:invoke("t", "nap", 0) >= 0)
    assert.is_false(pcall(pool.invoke, pool, "t", "boom"))
    assert.matches("time limit", select(2, pcall(pool.invoke, pool, "t", "spin")))
    assert.matches("memory", select(2, pcall(pool.invoke, pool, "t", "hog")))
    -- a call queued behind a held state is cancelled before it starts
    local gate = Gate.new()
    local held = pool:submit("t", "gate", gate.port)
    gate:arrivals(1)
    local cancelled = pool:submit("t", "nap", 0)
    assert.is_true(cancelled:cancel())
    gate:release()
    held:wait()
    local s = pool:stats()
    pool:close()
    assert.are.same({ 2, 1, 1, 1, 0, 1, 3 },
      { s.succeeded, s.failed, s.time_limits, s.memory_limits, s.timeouts, s.cancelled, s.errors })
    assert.are.equal(s.errors, s.failed + s.time_limits + s.memory_limits)
    assert.are.equal(s.invokes, s.succeeded + s.errors + s.rejected + s.timeouts + s.cancelled)
    -- every call that reached a state was timed: the two successes and the three errors
    assert.are.same({ 5, 5, 1 }, { s.run.count, s.wait.count, s.peak_waiting })

    -- a queued call past acquire_timeout is a timeout, a call refused by a full queue is rejected
    local small = vmpool.new { core = 1, acquire_timeout = 0, max_waiting = 1 }
    small:compile("t", TIMED)
    held = small:submit("t", "gate", gate.port)
    gate:arrivals(1)
    local late = small:submit("t", "nap", 0)
    assert.has_error(function() late:wait() end)
    assert.is_false(pcall(small.invoke, small, "t", "nap", 0) and
      pcall(small.invoke, small, "t", "nap", 0) and pcall(small.invoke, small, "t", "nap", 0))
    gate:release()
    held:wait()
    gate:close()
    s = small:stats()
    small:close()
    assert.are.equal(s.invokes, s.succeeded + s.errors + s.rejected + s.timeouts + s.cancelled)
    assert.is_true(s.timeouts >= 1)
    assert.are.equal(s.run.count, s.succeeded + s.errors)
  end)

  it("keep the peaks of busy states and queued calls, and count idle closes", function()
    local gate = Gate.new()
    local pool = vmpool.new { core = 1, max_noncore = 1, idle_timeout = 0 }
    pool:compile("t", TIMED)
    -- the core state was busy being created, but no call had it yet
    assert.are.same({ 0, 0 }, { pool:stats().peak_busy, pool:stats().peak_waiting })
    local futures = {}
    for i = 1, 4 do futures[i] = pool:submit("t", "gate", gate.port) end
    gate:arrivals(2)
    local s = pool:stats()
    assert.are.same({ 2, 2, 2, 2 }, { s.busy, s.waiting, s.peak_busy, s.peak_waiting })
    gate:release()
    gate:arrivals(2)
    gate:release()
    for _, f in ipairs(futures) do f:wait() end
    s = pool:stats { reset = true }
    assert.are.same({ 2, 2, 1 }, { s.peak_busy, s.peak_waiting, s.idle_closed })
    assert.are.equal(s.closed, s.idle_closed)
    s = pool:stats()
    assert.are.same({ 0, 0 }, { s.peak_busy, s.peak_waiting })
    pool:close()
    gate:close()
  end)
end)

describe("vmpool.new's name option", function()
  it("names pools pool-N by default, refuses a name an open pool has, and frees it at close", function()
    local a = vmpool.new { core = 1, name = "metrics-spec" }
    local ok, err = pcall(vmpool.new, { core = 1, name = "metrics-spec" })
    assert.is_false(ok)
    assert.matches("^vmpool: option 'name' to vmpool.new: a pool named 'metrics%-spec' is open already", err)
    a:close()
    local b = vmpool.new { core = 1, name = "metrics-spec" }
    local c = vmpool.new { core = 1 }
    local samples = P.parse(vmpool.metrics())
    assert.are.equal(1, P.value(samples, "vmpool_states", { pool = "metrics-spec", kind = "core" }))
    local default
    for _, s in ipairs(samples) do
      if s.name == "vmpool_states" and s.labels.pool:match("^pool%-%d+$") then default = s.labels.pool end
    end
    assert.is_truthy(default, "no pool-N among " .. vmpool.metrics())
    b:close()
    c:close()
  end)

  it("must be 1 to 128 bytes of UTF-8 text", function()
    for _, bad in ipairs { "", ("x"):rep(129), "\255", 42 } do
      local ok, err = pcall(vmpool.new, { core = 1, name = bad })
      assert.is_false(ok)
      assert.matches("^vmpool: option 'name' to vmpool.new must be", err)
    end
  end)
end)

describe("vmpool.metrics()", function()
  it("parses with the Prometheus parser, without duplicate series, and matches stats()", function()
    local pool = vmpool.new { core = 2, name = "exposition", acquire_timeout = 0 }
    pool:compile("t", TIMED)
    for _ = 1, 5 do pool:invoke("t", "nap", 0.001) end
    assert.is_false(pcall(pool.invoke, pool, "t", "boom"))
    local dict = vmpool.shared("metrics-spec", { capacity = 8192 })
    for i = 1, 100 do dict:set("k" .. i, ("v"):rep(40)) end
    local text = vmpool.metrics()
    local s = pool:stats()
    local samples = P.parse(text)
    local function v(name, extra)
      local labels = { pool = "exposition" }
      for k, x in pairs(extra or {}) do labels[k] = x end
      return P.value(samples, name, labels)
    end
    assert.are.equal(5, v("vmpool_calls_total", { outcome = "succeeded" }))
    assert.are.equal(1, v("vmpool_calls_total", { outcome = "failed" }))
    for _, outcome in ipairs { "time_limit", "memory_limit", "timed_out", "cancelled", "refused" } do
      assert.are.equal(0, v("vmpool_calls_total", { outcome = outcome }), outcome)
    end
    assert.are.equal(0, v("vmpool_calls_in_flight"))
    assert.are.equal(2, v("vmpool_states", { kind = "core" }))
    assert.are.equal(s.created, v("vmpool_states_created_total"))
    assert.are.equal(2, v("vmpool_states_max"))
    -- histograms: cumulative buckets ending in +Inf = _count, and seconds
    for _, h in ipairs { "vmpool_call_wait_seconds", "vmpool_call_run_seconds" } do
      local last = -1
      local buckets = 0
      for _, x in ipairs(samples) do
        if x.name == h .. "_bucket" and x.labels.pool == "exposition" then
          assert.is_true(x.value >= last, h .. " buckets are cumulative")
          last = x.value
          buckets = buckets + 1
        end
      end
      assert.are.equal(32, buckets)
      assert.are.equal(6, v(h .. "_count"))
      assert.are.equal(6, v(h .. "_bucket", { le = "+Inf" }))
    end
    local function type_of(family)
      for _, x in ipairs(samples) do if x.family == family then return x.type end end
    end
    assert.are.equal("histogram", type_of("vmpool_call_run_seconds"))
    assert.are.equal("counter", type_of("vmpool_calls"))
    assert.are.equal("gauge", type_of("vmpool_states"))
    -- the five 1 ms naps ran at least 1 ms: none counts at or below 1 ms (the failed call may,
    -- unless it was preempted), all six below 2.8 hours
    assert.is_true(v("vmpool_call_run_seconds_bucket", { le = "0.001" }) <= 1)
    assert.are.equal(6, v("vmpool_call_run_seconds_bucket", { le = "10000" }))
    assert.is_true(math.abs(v("vmpool_call_run_seconds_sum") - s.run.sum) < 1e-6)
    assert.are.equal(8192, P.value(samples, "vmpool_shared_dict_capacity_bytes", { dict = "metrics-spec" }))
    assert.are.equal(dict:free_space(), P.value(samples, "vmpool_shared_dict_free_bytes", { dict = "metrics-spec" }))
    local items = P.value(samples, "vmpool_shared_dict_items", { dict = "metrics-spec" })
    local evictions = P.value(samples, "vmpool_shared_dict_evictions_total", { dict = "metrics-spec" })
    assert.are.equal(#dict:get_keys(0), items)
    assert.are.equal(100, items + evictions)
    pool:close()
    -- a closed pool leaves the exposition
    assert.is_nil(P.value(P.parse(vmpool.metrics()), "vmpool_states", { pool = "exposition" }))
  end)

  it("puts the caller's labels first on every series and escapes label values", function()
    -- (a carriage return and a tab are not escaped: the format escapes only \\, \" and \n)
    local name = 'a "quoted" \\ name\nover two\r\tlines'
    local pool = vmpool.new { core = 1, name = name }
    local text = vmpool.metrics { labels = { worker = 3, zone = "eu\"1" } }
    local samples = P.parse(text)
    assert.is_true(#samples > 0)
    for _, s in ipairs(samples) do
      assert.are.equal("3", s.labels.worker)
      assert.are.equal('eu"1', s.labels.zone)
    end
    assert.are.equal(1, P.value(samples, "vmpool_states", { pool = name, kind = "core" }))
    local line = 'vmpool_states{worker="3",zone="eu\\"1",'
      .. 'pool="a \\"quoted\\" \\\\ name\\nover two\r\tlines",kind="core"} 1'
    assert.matches(line, text, 1, true)
    pool:close()
  end)

  it("refuses bad options with vmpool: errors", function()
    local cases = {
      { 42, "expected an options table or nothing, got number" },
      { { label = {} }, "unknown option 'label'" },
      { { labels = "x" }, "labels must be a table" },
      { { labels = { pool = "x" } }, "label name 'pool' is not allowed" },
      { { labels = { ["9x"] = "x" } }, "label name '9x' is not allowed" },
      { { labels = { __x = "x" } }, "label name '__x' is not allowed" },
      { { labels = { [1] = "x" } }, "label name a number key is not allowed" },
      { { labels = { worker = {} } }, "the value of label 'worker' must be a string or a number, got table" },
    }
    for _, c in ipairs(cases) do
      local ok, err = pcall(vmpool.metrics, c[1])
      assert.is_false(ok)
      assert.matches("^vmpool: bad argument #1 to 'vmpool.metrics': ", err)
      assert.matches(c[2], err, 1, true)
    end
  end)

  it("includes the counters of the event-loop adapters that are loaded", function()
    local has_luv, luv_adapter = pcall(require, "vmpool.luv")
    if not has_luv then
      pending("needs luv (lua-luv)")
      return
    end
    local pool = vmpool.new { core = 1 }
    pool:compile("t", TIMED)
    local done = false
    luv_adapter.spawn(function()
      pool:co_invoke("t", "nap", 0)
      done = true
    end)
    luv_adapter.loop.run()
    assert.is_true(done)
    local samples = P.parse(vmpool.metrics())
    local stats = luv_adapter.stats()
    assert.are.equal(stats.waits, P.value(samples, "vmpool_adapter_waits_total", { adapter = "luv" }))
    assert.are.equal(stats.completions, P.value(samples, "vmpool_adapter_completions_total", { adapter = "luv" }))
    assert.are.equal(0, P.value(samples, "vmpool_adapter_in_flight", { adapter = "luv" }))
    pool:close()
  end)
end)
