-- examples/openresty works when copied: the suite copies the directory to a temporary place and
-- runs the shell steps of its README ("## Run it"), checking each commented step's output against
-- its comment (`...` at the end: the output goes on). Run by scripts/test-ngx.sh. Two steps are
-- the suite's own: the rock comes from lua_modules/luajit (VMPOOL_TREE, the tree scripts/rock.sh
-- installs into, instead of the README's `luarocks install`), and PORT is a free port.
local H = require "spec.ngx.nginx"

local TMP = assert(os.getenv("VMPOOL_NGX_TMP"), "run by scripts/test-ngx.sh (VMPOOL_NGX_TMP)")

local function readme_steps()
  local readme = assert(H.read_file(H.ROOT .. "/examples/openresty/README.md"))
  local section = assert(readme:match("\n## Run it\n(.-)\n## "), "the README has no 'Run it' section")
  local block = assert(section:match("```sh\n(.-)```"), "'Run it' has no sh block")
  return H.lines(block)
end

local function squeeze(s)
  return (s:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", ""))
end

local function matches(expected, out)
  local prefix = expected:match("^(.-) %.%.%.$")
  if prefix then
    return squeeze(out):sub(1, #prefix) == prefix
  end
  return squeeze(out) == expected
end

describe("examples/openresty copied out of the repository", function()
  it("runs the steps of its README, each step answering what the README says", function()
    -- directly under TMP, so that test-ngx.sh stops a leftover nginx by its logs/nginx.pid
    local dir = TMP .. "/example"
    -- the nginx workers (nobody, when the suite runs as root) read app.lua from the copy
    assert(H.sh("chmod 755 " .. H.quote(TMP)))
    local env = "export PORT=" .. H.free_port() .. " VMPOOL_TREE=" .. H.quote(H.ROOT .. "/lua_modules/luajit")
      .. "; "
    local cwd, ran, checked = H.ROOT, {}, 0
    local ok, err = pcall(function()
      for _, line in ipairs(readme_steps()) do
        local command, expected = line:match("^(.-)%s+#%s+(.-)%s*$")
        command = (command or line):gsub("/tmp/vmpool%-demo", dir)
        if command:match("^luarocks .* install .*vmpool$") or command:match("^export PORT=%d+$") then
          ran[#ran + 1] = "(the suite's own) " .. command
        elseif command:match("^cd ") then
          cwd = command:match("^cd (.+)$")
        else
          local done, out = H.sh("cd " .. H.quote(cwd) .. " && " .. env .. command)
          assert(done, command .. " failed: " .. out)
          ran[#ran + 1] = command
          if expected then
            assert(matches(expected, out), command .. ": expected '" .. expected .. "', got '" .. squeeze(out) .. "'")
            checked = checked + 1
          end
        end
      end
    end)
    local pid = tonumber((H.read_file(dir .. "/logs/nginx.pid") or ""):match("%d+"))
    if pid and H.alive(pid) then
      H.sh("cd " .. H.quote(dir) .. " && ./run.sh stop")
    end
    assert(ok, err)
    assert.are.equal(6, checked)
    assert.is_truthy(table.concat(ran, "\n"):find("./run.sh stop", 1, true))
    assert.is_falsy(pid and H.alive(pid), "nginx still runs after ./run.sh stop")
  end)
end)
