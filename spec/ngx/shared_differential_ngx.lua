-- vmpool.shared against ngx.shared.DICT in the same nginx worker (issue 11: "the API and
-- semantics of ngx.shared.DICT, so code written for ngx.shared runs unchanged"): the same seeded
-- random operations (spec/ngx/shared_ops.lua: every method, every kind of value, flags, TTLs,
-- incr with and without init, lists, bad keys) on both, every result compared, number of results
-- included. And ngx.shared.DICT used from a pool state against the same zone kind on the event
-- loop. Errors compare as "an error" (the messages differ on purpose). Run by scripts/test-ngx.sh.
local H = require "spec.ngx.nginx"

local CONF = [[
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 1;
error_log logs/error.log notice;
pid logs/nginx.pid;
events { worker_connections 64; }
http {
  access_log off;
  lua_shared_dict host_zone 16m;
  lua_shared_dict state_zone 16m;
  lua_shared_dict small_zone 100k;
  lua_shared_dict fill_12k 12k;
  lua_shared_dict fill_100k 100k;
  lua_shared_dict fill_1m 1m;
  lua_shared_dict fill_a_much_longer_name_of_the_zone_x 100k;
  lua_package_cpath "@CPATH@;;";
  lua_package_path "@SPEC@/?.lua;/usr/share/lua/5.1/?.lua;;";
  init_worker_by_lua_block {
    local vmpool = require "vmpool"
    vmpool.ngx.pool("ops", function()
      local f = assert(io.open("@SPEC@/shared_ops.lua"))
      local source = f:read("*a")
      f:close()
      local pool = vmpool.new { core = 1, max_noncore = 0 }
      pool:compile("ops", "local Ops = (function() " .. source .. " end)()\n" .. [==[
        return { run = function(seed, n, flush, zone)
          local d = ngx.shared[zone]
          d:flush_all()
          d:flush_expired()
          return Ops.apply(d, Ops.generate(seed, n, { flush = flush }))
        end }
      ]==])
      return pool
    end)
  }
  server {
    listen 127.0.0.1:@PORT@;
    location = /scenario {
      content_by_lua_block {
        local Ops = require "shared_ops"
        local vmpool = require "vmpool"
        local name = ngx.var.arg_name
        local want_dict = ngx.shared.small_zone
        want_dict:flush_all()
        want_dict:flush_expired()
        ngx.say("ngx.shared: ", Ops.scenarios[name](want_dict))
        ngx.say("vmpool:     ", Ops.scenarios[name](vmpool.shared("scenario_" .. name, { capacity = "100k" })))
      }
    }
    location = /fill {
      content_by_lua_block {
        local Ops = require "shared_ops"
        local vmpool = require "vmpool"
        local zone, size = ngx.var.arg_zone, ngx.var.arg_size
        ngx.say(Ops.fill(ngx.shared[zone]))
        -- a name as long as the zone's (nginx keeps the zone's name in the zone), one per shard count
        local shards = tonumber(ngx.var.arg_shards)
        local name = string.char(64 + shards) .. zone:sub(2)
        ngx.say(Ops.fill(vmpool.shared(name, { capacity = size, shards = shards })))
      }
    }
    location = /diff {
      content_by_lua_block {
        local Ops = require "shared_ops"
        local vmpool = require "vmpool"
        local seed, n = tonumber(ngx.var.arg_seed), tonumber(ngx.var.arg_n)
        local flush = ngx.var.arg_flush == "1"
        local ops = Ops.generate(seed, n, { flush = flush })
        local want_dict = ngx.shared.host_zone
        want_dict:flush_all()
        want_dict:flush_expired()
        local want = Ops.apply(want_dict, ops)
        local got
        if ngx.var.arg_where == "state" then
          got = vmpool.ngx.pool("ops"):co_invoke("ops", "run", seed, n, flush, "state_zone")
        else
          local name = "diff_" .. ngx.var.arg_shards .. "_" .. seed .. (flush and "_flush" or "")
          local d = vmpool.shared(name, { capacity = "16m", shards = tonumber(ngx.var.arg_shards) })
          got = Ops.apply(d, ops)
        end
        local diffs = Ops.differences(ops, want, got, 10)
        ngx.say(#ops, " operations, ", #got, " results, ", #diffs, " differences")
        for _, d in ipairs(diffs) do ngx.say(d) end
      }
    }
  }
}
]]

describe("vmpool.shared and ngx.shared.DICT, the same operations side by side", function()
  local nginx, port

  setup(function()
    nginx, port = H.start_conf(CONF)
  end)

  teardown(function()
    if nginx then
      nginx:stop()
      nginx:remove()
    end
  end)

  local function differences(query)
    local status, body = H.get(port, "/diff?" .. query)
    assert.are.equal(200, status, body)
    return body
  end

  -- what each case compares, its query (3,000 operations each) and its seeds
  local CASES = {
    { "answers every operation as ngx.shared.DICT does (16 shards)", "where=host&shards=16", { 1, 2, 3, 4 } },
    { "answers as ngx.shared.DICT does with flush_all among the operations (1 shard)",
      "where=host&shards=1&flush=1", { 5, 6 } },
    { "gives a pool state's ngx.shared.DICT the event loop's answers", "where=state&flush=1", { 7, 8 } },
  }
  for _, name in ipairs { "full_list_push", "huge_ttl", "ttl_ms", "number_keys", "bad_input", "eviction_order",
    "fragmentation", "list_eviction", "expiry" } do
    it("answers as ngx.shared.DICT does in the scenario " .. name, function()
      local status, body = H.get(port, "/scenario?name=" .. name)
      assert.are.equal(200, status, body)
      local want, got = body:match("^ngx.shared: ([^\n]*)\nvmpool:     ([^\n]*)\n$")
      assert.is_truthy(want, body)
      assert.are.equal(want, got)
    end)
  end

  -- capacity as nginx counts it (slab pages): entries before the first eviction, safe_set's
  -- refusals, free_space, a value larger than the dictionary, lists; each zone size and name
  -- length, with one shard and with many
  for _, z in ipairs { { "fill_12k", "12k" }, { "fill_100k", "100k" }, { "fill_1m", "1m" },
    { "fill_a_much_longer_name_of_the_zone_x", "100k" } } do
    for _, shards in ipairs { 1, 16 } do
      it(("fills, evicts and refuses as ngx.shared.DICT does: %s, %d shard%s"):format(z[2], shards,
        shards > 1 and "s" or ""), function()
        local status, body = H.get(port, ("/fill?zone=%s&size=%s&shards=%d"):format(z[1], z[2], shards))
        assert.are.equal(200, status, body)
        local lines = {}
        for line in body:gmatch("[^\n]*\n") do lines[#lines + 1] = line end
        local half = #lines / 2
        assert.are.equal(table.concat(lines, "", 1, half), table.concat(lines, "", half + 1))
      end)
    end
  end

  for _, c in ipairs(CASES) do
    local title, query, seeds = c[1], c[2], c[3]
    for _, seed in ipairs(seeds) do
      it(title .. ", seed " .. seed, function()
        assert.are.equal("3000 operations, 3000 results, 0 differences\n",
          differences(query .. "&n=3000&seed=" .. seed))
      end)
    end
  end
end)
