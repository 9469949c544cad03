-- The document being written: lines of Markdown collected by `w` and `table_md` in section order,
-- and `write_file` for it and the charts.
local M = {}

local lines = {}
local function w(...)
  local s = table.concat({ ... })
  lines[#lines + 1] = s
end

local function table_md(header, rows)
  w("| " .. table.concat(header, " | ") .. " |")
  local sep = {}
  for i = 1, #header do sep[i] = i == 1 and "---" or "--:" end
  w("|" .. table.concat(sep, "|") .. "|")
  for _, r in ipairs(rows) do w("| " .. table.concat(r, " | ") .. " |") end
  w("")
end

local function write_file(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

--- Says why a suite's result is missing (not run, skipped, failed); true when it is. `rerun`: the
--- command that runs it alone.
local function unavailable(res, rerun)
  if not res then
    w("*Not run in this report (`make report` runs it); on its own: `", rerun, "`.*")
  elseif res.skipped then
    w("**Skipped: ", res.skipped, "**, so this run has no figures here.")
  elseif res.failed then
    w("**Failed:** ", res.failed)
  else
    return false
  end
  w("")
  return true
end

--- the document so far, one string
local function text() return table.concat(lines, "\n") .. "\n" end

M.w, M.table_md, M.write_file, M.text, M.unavailable = w, table_md, write_file, text, unavailable

return M
