-- Parses a Prometheus text exposition with a real parser (Python's prometheus_client, through
-- spec/support/parse_metrics.py; Debian: python3-prometheus-client, which scripts/install-deps.sh
-- installs). P.parse(text) returns the samples { family, type, name, value, labels = {...} } in
-- order, or raises with the parser's complaint (a syntax error, a family or a series twice).
local P = {}

local HERE = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "spec/support"

local function succeeded(...)
  local a = ...
  return a == true or a == 0
end

-- The first Python that has prometheus_client (the pyenv shim on PATH may lack Debian's packages).
local python
local function find_python()
  if python then return python end
  for _, candidate in ipairs { "python3", "/usr/bin/python3" } do
    if succeeded(os.execute(candidate .. " -c 'import prometheus_client' >/dev/null 2>&1")) then
      python = candidate
      return python
    end
  end
  error("no python3 with prometheus_client: install python3-prometheus-client (scripts/install-deps.sh)")
end

function P.parse(text)
  local py = find_python()
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  local pipe = assert(io.popen(py .. " " .. HERE .. "/parse_metrics.py " .. path))
  local out = pipe:read("*a")
  pipe:close()
  os.remove(path)
  if out:sub(1, 7) == "ERROR: " then
    error("the Prometheus parser refused the exposition: " .. out, 2)
  end
  local samples = {}
  for record in out:gmatch("[^\30]+") do
    local fields = {}
    for field in (record .. "\31"):gmatch("([^\31]*)\31") do fields[#fields + 1] = field end
    local value = fields[4] == "inf" and math.huge or fields[4] == "-inf" and -math.huge or tonumber(fields[4])
    local s = { family = fields[1], type = fields[2], name = fields[3], value = value, labels = {} }
    for i = 5, #fields, 2 do s.labels[fields[i]] = fields[i + 1] end
    samples[#samples + 1] = s
  end
  return samples
end

-- The value of the sample `name` whose labels include every pair of `labels`, or nil.
function P.value(samples, name, labels)
  for _, s in ipairs(samples) do
    if s.name == name then
      local all = true
      for k, v in pairs(labels or {}) do
        if s.labels[k] ~= tostring(v) then all = false end
      end
      if all then return s.value end
    end
  end
end

return P
