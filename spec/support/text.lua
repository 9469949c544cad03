-- Text helpers the specs that read the repository's own files share.
local T = {}

--- The whole file at `path` (relative to the repository root, where busted runs), or an error.
function T.read(path)
  local f = assert(io.open(path, "rb"))
  local text = f:read("*a")
  f:close()
  return text
end

--- `s` with every run of whitespace made one space, and none at either end.
function T.squeeze(s)
  return (s:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", ""))
end

return T
