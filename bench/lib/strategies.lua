-- The rows of the workload table: the five pool strategies of the seed report, idle release, the
-- vmpool default and core counts around it, and the baselines (a direct call in the host; Lua Lanes
-- and effil when installed). `opts(cpus)` gives the vmpool.new options (without `init`).
local huge = math.huge

local M = {}

M.list = {
  {
    id = "direct", kind = "direct",
    label = "direct call in the host (floor)",
    short = "direct",
  },
  {
    id = "nopool", kind = "vmpool",
    label = "no pool: a new state per call",
    short = "no pool",
    config = "core=0, max_noncore=huge, idle_timeout=0",
    opts = function() return { core = 0, max_noncore = huge, idle_timeout = 0 } end,
    seed = "no pool",
  },
  {
    id = "unbounded", kind = "vmpool",
    label = "unbounded pool, idle release after 1 s",
    short = "unbounded",
    config = "core=0, max_noncore=huge, idle_timeout=1",
    opts = function() return { core = 0, max_noncore = huge, idle_timeout = 1 } end,
    idle_release = 1,
    seed = "pool, unbounded size",
  },
  {
    id = "c1000_unl", kind = "vmpool",
    label = "core 1000 + unlimited non-core",
    short = "c1000+unl",
    config = "core=1000, max_noncore=huge",
    opts = function() return { core = 1000, max_noncore = huge } end,
    seed = "core 1000 + unlimited non-core",
  },
  {
    id = "c2000_unl", kind = "vmpool",
    label = "core 2000 + unlimited non-core",
    short = "c2000+unl",
    config = "core=2000, max_noncore=huge",
    opts = function() return { core = 2000, max_noncore = huge } end,
    seed = "core 2000 + unlimited non-core",
  },
  {
    id = "c1000_blk", kind = "vmpool",
    label = "core 1000 + blocking",
    short = "c1000 blk",
    config = "core=1000, max_noncore=0, blocking=true",
    opts = function() return { core = 1000, max_noncore = 0, blocking = true } end,
    seed = "core 1000 + blocking",
  },
  {
    id = "c2000_blk", kind = "vmpool",
    label = "core 2000 + blocking",
    short = "c2000 blk",
    config = "core=2000, max_noncore=0, blocking=true",
    opts = function() return { core = 2000, max_noncore = 0, blocking = true } end,
    seed = "core 2000 + blocking",
  },
  {
    id = "c1000_m2000_blk", kind = "vmpool",
    label = "core 1000 + max non-core 2000 + blocking",
    short = "c1000+2000 blk",
    config = "core=1000, max_noncore=2000, blocking=true",
    opts = function() return { core = 1000, max_noncore = 2000, blocking = true } end,
    seed = "core 1000 + max non-core 2000 + blocking",
  },
  {
    id = "default", kind = "vmpool",
    label = "vmpool default (core = CPUs, blocking)",
    short = "default (core=CPUs)",
    config = "vmpool.new{} (core=CPUs, max_noncore=0, blocking=true)",
    opts = function() return {} end,
  },
  {
    id = "c2xcpu_blk", kind = "vmpool",
    label = "core = 2 x CPUs + blocking",
    short = "core=2xCPUs",
    config = "core=2*CPUs, max_noncore=0, blocking=true",
    opts = function(cpus) return { core = 2 * cpus, max_noncore = 0, blocking = true } end,
  },
  {
    id = "c4xcpu_blk", kind = "vmpool",
    label = "core = 4 x CPUs + blocking",
    short = "core=4xCPUs",
    config = "core=4*CPUs, max_noncore=0, blocking=true",
    opts = function(cpus) return { core = 4 * cpus, max_noncore = 0, blocking = true } end,
  },
  {
    id = "lanes", kind = "lanes",
    label = "Lua Lanes: CPUs lanes fed through a linda",
    short = "Lanes",
    config = "lanes.gen + linda:send/receive, one lane per CPU",
  },
  {
    id = "effil", kind = "effil",
    label = "effil: CPUs threads fed through a channel",
    short = "effil",
    config = "effil.thread + effil.channel, one thread per CPU",
  },
}

M.by_id = {}
for _, s in ipairs(M.list) do M.by_id[s.id] = s end

return M
