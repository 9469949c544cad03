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

--- the document so far, one string
local function text() return table.concat(lines, "\n") .. "\n" end

M.w, M.table_md, M.write_file, M.text = w, table_md, write_file, text

return M
