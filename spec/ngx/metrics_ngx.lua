-- /metrics of examples/openresty (issue 38): every worker's vmpool metrics in one exposition,
-- scraped while wrk loads the server and read by Prometheus' own text parser (Python's
-- prometheus_client, spec/support/prometheus.lua): it parses, has no duplicate series, has both
-- workers' series, and its counters only grow. Run by scripts/test-ngx.sh.
local H = require "spec.ngx.nginx"
local P = require "spec.support.prometheus"

local EXAMPLE = H.ROOT .. "/examples/openresty"

-- the example's nginx.conf as it is (two workers), with the paths run.sh would write
local function example_conf(port, test_port)
  local conf = assert(H.read_file(EXAMPLE .. "/nginx.conf"))
  conf = H.replace_once(conf, '"${prefix}?.lua;', '"' .. EXAMPLE .. "/?.lua;")
  -- a second listener, for H.start to wait on
  conf = H.replace_once(conf, "include listen.conf;", "include listen.conf; listen 127.0.0.1:" .. test_port .. ";")
  return conf, {
    ["lua_cpath.conf"] = 'lua_package_cpath "' .. H.ROCK_CPATH .. ';;";\n',
    ["listen.conf"] = "listen 127.0.0.1:" .. port .. ";\n",
  }
end

-- sum of a metric's samples per worker, and the set of workers seen
local function per_worker(samples, name, labels)
  local by = {}
  for _, s in ipairs(samples) do
    if s.name == name then
      local all = true
      for k, v in pairs(labels or {}) do
        if s.labels[k] ~= v then all = false end
      end
      if all then
        by[s.labels.worker] = (by[s.labels.worker] or 0) + s.value
      end
    end
  end
  return by
end

local function scrape(port)
  local status, body, headers = H.get(port, "/metrics")
  assert.are.equal(200, status)
  assert.matches("^text/plain; version=0.0.4", headers["content-type"])
  return P.parse(body), body
end

describe("examples/openresty /metrics", function()
  local nginx, port

  setup(function()
    nginx, port = H.start(example_conf)
  end)

  teardown(function()
    if nginx then
      nginx:stop()
      nginx:remove()
    end
  end)

  it("serves both workers' metrics, parseable and without duplicate series, while under load", function()
    -- both workers publish when they start
    H.wait_until("both workers' metrics", 10, function()
      local workers = per_worker((scrape(port)), "vmpool_states", { pool = "app", kind = "core" })
      return workers["0"] and workers["1"], "workers seen"
    end)
    local cmd = ("wrk -t2 -c8 -d3s --timeout 10s 'http://127.0.0.1:%d/fib?n=18' 2>&1"):format(port)
    local wrk = assert(io.popen(cmd))
    local scrapes, last = 0, {}
    local ok, err = pcall(function()
      local deadline = H.now() + 2.5
      repeat
        local samples = scrape(port)
        scrapes = scrapes + 1
        local calls = per_worker(samples, "vmpool_calls_total", { pool = "app" })
        assert.is_truthy(calls["0"] and calls["1"], "a worker's series are missing")
        for worker, n in pairs(calls) do
          assert.is_true(n >= (last[worker] or 0), "worker " .. worker .. "'s calls went back")
          last[worker] = n
        end
        -- each histogram: cumulative buckets, +Inf equal to the count
        for _, h in ipairs { "vmpool_call_wait_seconds", "vmpool_call_run_seconds" } do
          for _, worker in ipairs { "0", "1" } do
            local inf = per_worker(samples, h .. "_bucket", { pool = "app", le = "+Inf" })[worker]
            local count = per_worker(samples, h .. "_count", { pool = "app" })[worker]
            assert.are.equal(count, inf)
          end
        end
      until H.now() > deadline
    end)
    local out = wrk:read("*a")
    wrk:close()
    assert(ok, err)
    assert.is_true(scrapes >= 3, "only " .. scrapes .. " scrapes during the load")
    local requests = tonumber(out:match("(%d+) requests in"))
    assert.is_truthy(requests, out)
    assert.is_nil(out:find("Non-2xx", 1, true), out)
    -- once every worker has published after the load, the calls add up: one per request (wrk may
    -- have cut up to 8 requests in flight at its end, which the server still ran) plus the
    -- warm-up call of each worker, all succeeded, none in flight
    local final = H.wait_until("the load's calls in /metrics", 10, function()
      local samples = scrape(port)
      local succeeded = per_worker(samples, "vmpool_calls_total", { pool = "app", outcome = "succeeded" })
      local total = (succeeded["0"] or 0) + (succeeded["1"] or 0)
      return total >= requests + 2 and samples, total .. " of " .. requests + 2
    end)
    local all = per_worker(final, "vmpool_calls_total", { pool = "app" })
    local succeeded = per_worker(final, "vmpool_calls_total", { pool = "app", outcome = "succeeded" })
    local runs = per_worker(final, "vmpool_call_run_seconds_count", { pool = "app" })
    local total = 0
    for _, worker in ipairs { "0", "1" } do
      assert.are.equal(all[worker], succeeded[worker])
      assert.are.equal(succeeded[worker], runs[worker])
      assert.are.equal(0, per_worker(final, "vmpool_calls_in_flight", { pool = "app" })[worker])
      total = total + succeeded[worker]
    end
    assert.is_true(total <= requests + 2 + 8, total .. " calls for " .. requests .. " requests")
    -- the adapter's counters are there too, per worker
    local waits = per_worker(final, "vmpool_adapter_waits_total", { adapter = "ngx" })
    assert.is_true(waits["0"] + waits["1"] >= requests)
    assert.are.same({}, nginx:log_lines { "alert", "crit", "emerg", "error" })
  end)
end)
