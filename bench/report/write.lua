-- Writes bench/REPORT.md and bench/charts/*.svg from the results in bench/out/ (run by
-- bench/run.sh after the suites; `bench/run.sh render` reruns it alone). Every number, and every
-- comparison the prose makes, is computed from those results: rerunning the suites on another
-- machine rewrites the analysis to match its numbers. One module per section next to this file
-- (header, targets, micro, peers, workload, callgrind, heavy, analysis, seed), on top of
-- results.lua (the saved results and their summaries), format.lua (numbers, comparisons) and
-- doc.lua (the Markdown being written), required as `report.<name>`.
--
-- lua5.4 bench/report/write.lua                   the whole report
-- lua5.4 bench/report/write.lua --section=micro   the micro benchmark only, on stdout (make bench)
package.path = "bench/lib/?.lua;bench/?.lua;" .. package.path
local B = require "benchlib"
local D = require "report.doc"
local R = require "report.results"

local o = B.options(arg)

-- the whole report reads the results of `bench/run.sh report` (report-*.dat); `--section=micro`
-- (make bench) those of `bench/run.sh micro` (micro.dat)
R.load(o.section == "micro" and "" or "report-")

local w = D.w

os.execute("mkdir -p bench/charts")
if o.section == "micro" then
  require("report.micro").section(false)
  local text = D.text()
  io.write(text)
  D.write_file(R.OUT .. "/micro.md", text)
  return
end

require("report.header").section(R.machine or {})
for _, s in ipairs {
  { "Targets", "targets" },
  { "1. Micro benchmark", "micro", true },
  { "2. Peers: Lua Lanes and effil in the same run", "peers" },
  { "3. Workload: strategies × parallelism × CPUs", "workload", true },
  { "4. Instructions per call (callgrind)", "callgrind", true },
  { "5. Heavy work: OpenResty, parallel speedup and `pool:map`", "heavy", true },
  { "6. Analysis", "analysis" },
  { "7. The seed report's figures (gopher-lua, for reference only)", "seed" },
} do
  w("## ", s[1])
  w("")
  require("report." .. s[2]).section(s[3])
end
w("## 8. Method and reruns")
w("")
w("See `bench/README.md`: what each suite measures, how runs are interleaved, and how to rerun one part " ..
  "(`bench/run.sh micro|workload|callgrind|heavy`, `bench/compare A B`). Raw results of this report: " ..
  "`bench/out/*.dat` (not committed; every single run is kept there).")
D.write_file("bench/REPORT.md", D.text())
print("bench: wrote bench/REPORT.md and bench/charts/*.svg")
