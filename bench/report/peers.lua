-- Section 2 of the report: the peers, Lua Lanes and effil, measured by bench/peers/peers.lua in the micro
-- suite's interleaved repetitions next to vmpool running the same four figures, on every runtime
-- where they load; each ratio pairs a peer's run with vmpool's run of the same repetition. When
-- they were not found the section says so and how to build them.
local B = require "benchlib"
local D = require "report.doc"
local F = require "report.format"
local R = require "report.results"

local w, table_md = D.w, D.table_md
local num, t, mmm, x = F.num, F.t, F.mmm, F.x
local RUNTIME_LABEL = R.RUNTIME_LABEL

local PEERS = { { id = "lanes", label = "Lua Lanes" }, { id = "effil", label = "effil" } }

-- the figures of bench/peers/peers.lua: how to read one from a run, and how to print it
local FIGURES = {
  { label = "round trip, µs (one worker, blocking)", value = function(f) return f.round_trip and f.round_trip.us end,
    fmt = t },
  { label = "calls/s, 1000 in flight over 2 workers",
    value = function(f) return f.stream and f.stream.us > 0 and 1e6 / f.stream.us or nil end,
    fmt = function(v) return num(v, 0) end },
  { label = "RSS per idle worker, KB", value = function(f) return f.idle and f.idle.kb_per_worker end,
    fmt = function(v) return num(v, 0) end },
  { label = "no pool: a new worker per call, µs", value = function(f) return f.spawn and f.spawn.us end, fmt = t },
}

local function runs_of(micro, lib, lua) return micro.runs["peers:" .. lib .. ":" .. lua] or {} end

--- summary of one figure over the runs of `lib` on `lua`
local function figure(micro, lib, lua, fig)
  local xs = {}
  for _, r in ipairs(runs_of(micro, lib, lua)) do xs[#xs + 1] = r.figures and fig.value(r.figures) end
  return B.summary(xs)
end

--- summary of the per-repetition ratios peer ÷ vmpool of one figure (runs paired by repetition)
local function paired(micro, lib, lua, fig)
  local mine = {}
  for _, r in ipairs(runs_of(micro, "vmpool", lua)) do
    if r.rep and r.figures then mine[r.rep] = fig.value(r.figures) end
  end
  local xs = {}
  for _, r in ipairs(runs_of(micro, lib, lua)) do
    local a, b = r.figures and fig.value(r.figures), r.rep and mine[r.rep]
    if a and b and b > 0 then xs[#xs + 1] = a / b end
  end
  return B.summary(xs)
end

--- the runtimes on which at least one peer ran
local function measured_runtimes(micro)
  local rts = {}
  for _, lua in ipairs(micro.settings.runtimes or {}) do
    for _, p in ipairs(PEERS) do
      if #runs_of(micro, p.id, lua) > 0 then
        rts[#rts + 1] = lua
        break
      end
    end
  end
  return rts
end

--- which peer was missing where, and why ("not found" lines from `require`)
local function missing(micro)
  local out = {}
  local presence = micro.peers and micro.peers.presence or {}
  for _, lua in ipairs(micro.settings.runtimes or {}) do
    for _, p in ipairs(PEERS) do
      local why = presence[lua] and presence[lua][p.id]
      if why == "present" and #runs_of(micro, p.id, lua) == 0 then why = "every run failed (bench/out/run.log)" end
      if why ~= "present" then
        out[#out + 1] = string.format("%s on %s (%s)", p.label, RUNTIME_LABEL[lua] or lua,
          why and ("`" .. why:gsub(":$", "") .. "`") or "not looked for: this run predates the peers benchmark")
      end
    end
  end
  return out
end

local function how_to_reproduce()
  w("To reproduce: build both from their public sources, outside the repository, and point the report at " ..
    "them (`bench/peers/build.sh` installs cmake, g++ and clang if missing; see its header for the sources; Lanes 4 " ..
    "needs GCC 13 or later, so on Debian 12 use Lanes v3.17.2):")
  w("")
  w("```sh")
  w("git clone https://github.com/LuaLanes/lanes && git -C lanes checkout v3.17.2")
  w("git clone --recursive https://github.com/effil/effil")
  w("VMPOOL_PEERS=$HOME/vmpool-peers bench/peers/build.sh lanes effil lua5.1 lua5.4 luajit")
  w("VMPOOL_PEERS=$HOME/vmpool-peers make report")
  w("```")
  w("")
  w("Or install them with LuaRocks for each runtime (`luarocks --lua-version=5.4 install lanes`, `... install " ..
    "effil`) so that `require` finds them without VMPOOL_PEERS.")
  w("")
end

--- the versions the runs loaded
local function versions(micro, rts)
  local parts = {}
  for _, p in ipairs(PEERS) do
    local seen = {}
    for _, lua in ipairs(rts) do
      local r = runs_of(micro, p.id, lua)[1]
      if r and r.version and not seen[r.version] then
        seen[r.version] = true
        parts[#parts + 1] = p.label .. " " .. tostring(r.version)
      end
    end
  end
  return #parts > 0 and table.concat(parts, ", ") or "versions not reported"
end

-- the figures of bench/peers/channels.lua
local CHANNEL_FIGURES = {
  { label = "channel ping-pong host ↔ state, µs per round trip",
    value = function(f) return f.pingpong and f.pingpong.us end, fmt = t },
  { label = "messages/s, one state to the host",
    value = function(f) return f.to_host and f.to_host.us > 0 and 1e6 / f.to_host.us or nil end,
    fmt = function(v) return num(v, 0) end },
  { label = "stream items/s (vmpool only)",
    value = function(f) return f.stream and f.stream.us > 0 and 1e6 / f.stream.us or nil end,
    fmt = function(v) return num(v, 0) end },
}

--- Channels (bench/peers/channels.lua): vmpool on every runtime, the peers where they loaded, paired by
--- repetition as above.
local function channels(micro)
  local key = function(lib, lua) return "channels:" .. lib .. ":" .. lua end
  local rows = {}
  for _, lua in ipairs(micro.settings.runtimes or {}) do
    if #(micro.runs[key("vmpool", lua)] or {}) > 0 then
      for _, fig in ipairs(CHANNEL_FIGURES) do
        local function summary(lib)
          local xs = {}
          for _, r in ipairs(micro.runs[key(lib, lua)] or {}) do xs[#xs + 1] = r.figures and fig.value(r.figures) end
          return B.summary(xs)
        end
        local function ratio(lib)
          local mine, xs = {}, {}
          for _, r in ipairs(micro.runs[key("vmpool", lua)] or {}) do
            if r.rep and r.figures then mine[r.rep] = fig.value(r.figures) end
          end
          for _, r in ipairs(micro.runs[key(lib, lua)] or {}) do
            local a, b = r.figures and fig.value(r.figures), r.rep and mine[r.rep]
            if a and b and b > 0 then xs[#xs + 1] = a / b end
          end
          return B.summary(xs)
        end
        local row = { fig.label, RUNTIME_LABEL[lua] or lua, mmm(summary("vmpool"), fig.fmt) }
        for _, p in ipairs(PEERS) do
          local s = summary(p.id)
          row[#row + 1] = s and mmm(s, fig.fmt) or "–"
          local r = s and ratio(p.id)
          row[#row + 1] = r and mmm(r, x) or "–"
        end
        rows[#rows + 1] = row
      end
    end
  end
  if #rows == 0 then
    w("*Channels: not measured in this run (`bench/peers/channels.lua`, run by the micro suite).*")
    w("")
    return
  end
  w("**Channels** (`bench/peers/channels.lua`): a host ↔ worker ping-pong over two channels (vmpool: " ..
    "`vmpool.channel` in the host and a state; Lanes: one linda, two keys; effil: two `effil.channel`), " ..
    "small messages from one worker to the host as fast as they go, and `pool:stream` items into a " ..
    "generic `for` (vmpool only). Median of the runs [min–max]; **× vmpool** as above (for messages/s " ..
    "below 1× means fewer).")
  w("")
  table_md({ "figure", "runtime", "vmpool", "Lua Lanes", "Lanes × vmpool", "effil", "effil × vmpool" }, rows)
end

local function section()
  local micro = R.micro
  if not micro then
    w("*The micro benchmark has not been run (`bench/run.sh micro`), and the peers run with it.*")
    w("")
    return
  end
  channels(micro)
  local rts = measured_runtimes(micro)
  local absent = missing(micro)
  if #rts == 0 then
    w("**Skipped: neither Lua Lanes nor effil was found in this run** (", #absent > 0 and table.concat(absent, "; ")
      or "no runtime measured", micro.settings.peers and (", VMPOOL_PEERS=`" .. micro.settings.peers .. "`") or
      ", VMPOOL_PEERS not set", "), so there are no peer figures and no ratios.")
    w("")
    how_to_reproduce()
    return
  end
  w(string.format("Lua Lanes (a lane per worker, `lanes.gen` lanes reading jobs from a linda) and effil " ..
    "(`effil.thread` workers reading jobs from an `effil.channel`), used as their documentation recommends for a " ..
    "pool (`bench/lib/baselines.lua`), against vmpool on the same figures (`bench/peers/peers.lua`): " ..
    "one process per " ..
    "library and repetition, interleaved with the micro benchmark's runs; %s loaded from %s. Every worker runs " ..
    "the seed's script. Round trip: one worker, one blocking call at a time (vmpool: `core = 1`, `pool:invoke`). " ..
    "Calls/s: 1000 calls in flight over 2 workers, a new one sent as each result arrives (vmpool: `core = 2`, a " ..
    "ring of 1000 `pool:submit` futures). RSS per idle worker: resident memory of 32 more workers that have " ..
    "started and wait for a job (vmpool: `core = 32` after `new` and `compile`), ÷ 32. No pool: a new worker " ..
    "(Lua state and OS thread, running `init` and the script) for every call (vmpool: `core = 0, max_noncore = " ..
    "huge, idle_timeout = 0`, the workload's no-pool row). Median of %d runs [min–max]; **× vmpool** = the " ..
    "median [min–max] of the per-repetition ratios peer ÷ vmpool: above 1× the peer takes longer or uses more " ..
    "memory, except for calls/s, where below 1× means fewer calls.",
    versions(micro, rts), micro.settings.peers and ("`" .. micro.settings.peers .. "`") or "the default module paths",
    micro.settings.reps))
  w("")
  local rows = {}
  for _, lua in ipairs(rts) do
    for _, fig in ipairs(FIGURES) do
      local row = { fig.label, RUNTIME_LABEL[lua] or lua, mmm(figure(micro, "vmpool", lua, fig), fig.fmt) }
      for _, p in ipairs(PEERS) do
        local s = figure(micro, p.id, lua, fig)
        row[#row + 1] = mmm(s, fig.fmt)
        local r = s and paired(micro, p.id, lua, fig)
        row[#row + 1] = r and mmm(r, x) or "–"
      end
      rows[#rows + 1] = row
    end
  end
  table_md({ "figure", "runtime", "vmpool", "Lua Lanes", "Lanes × vmpool", "effil", "effil × vmpool" }, rows)
  if #absent > 0 then
    w("Not measured: ", table.concat(absent, "; "), ".")
    w("")
  end
  how_to_reproduce()
end

return { section = section }
