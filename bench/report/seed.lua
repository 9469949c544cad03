-- Section 7 of the report: the seed report's own figures (gopher-lua), quoted for reference; the
-- analysis compares only the directions of its conclusions.
local D = require "report.doc"

local w, table_md = D.w, D.table_md

local SEED = {
  -- strategy, CPUs, P, ms/op, memory/op, peak CPU, peak memory
  { "no pool", 2, 1000, 0.18455, "159.5KB", "190%", "476.9M" },
  { "no pool", 2, 2000, 0.168622, "159.5KB", "191%", "935.8M" },
  { "no pool", 2, 4000, 0.175112, "159.6KB", "190%", "1.82G" },
  { "pool, unbounded size", 2, 1000, 0.065165, "6.53KB", "44%", "291M" },
  { "pool, unbounded size", 2, 2000, 0.073247, "6.50KB", "50%", "560M" },
  { "pool, unbounded size", 2, 4000, 0.077863, "6.47KB", "52%", "1.08G" },
  { "core 1000 + unlimited non-core", 2, 4000, 0.046725, "7.4KB", "90%", "883M" },
  { "core 2000 + unlimited non-core", 2, 4000, 0.045968, "6.8KB", "66%", "962M" },
  { "core 1000 + blocking", 2, 4000, 0.048416, "6.52KB", "70%", "326M" },
  { "core 2000 + blocking", 2, 4000, 0.04729, "6.52KB", "72%", "652M" },
  { "core 1000 + blocking", 4, 4000, 0.046915, "6.52KB", "100%", "348M" },
  { "core 2000 + blocking", 4, 4000, 0.047518, "6.52KB", "102%", "649M" },
  { "core 1000 + max non-core 2000 + blocking", 2, 4000, 0.048806, "7.2KB", "84%", "682M" },
}

local function section()
  w("Copied from the seed report (gopher-lua 虚拟机池, `go test -bench` with `SetParallelism`, 10 s × 5 runs). " ..
    "**Another machine, another language and another VM: not comparable figure by figure with the tables above;** " ..
    "only the directions of its conclusions are compared in the analysis.")
  w("")
  local rows = {}
  for _, r in ipairs(SEED) do
    rows[#rows + 1] = { r[1], tostring(r[2]), tostring(r[3]), string.format("%.6g", r[4]),
      string.format("%.1f", r[4] * 1000), r[5], r[6], r[7] }
  end
  table_md({ "gopher-lua pool strategy", "CPUs", "parallelism", "ms/op", "= µs/op", "memory/op", "peak CPU",
    "peak memory" }, rows)
end

return { section = section }
