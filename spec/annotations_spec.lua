-- The editor annotations (types/vmpool.lua, installed by the rock) cannot fall behind the module:
-- every function and method it exports, every option vmpool.new accepts, every field of stats()
-- and every function and setting of vmpool.ngx must appear there; so must every function and
-- field of the event-loop adapters in theirs (types/vmpool/luv.lua, types/vmpool/cqueues.lua).
local vmpool = require "vmpool"

local read = require("spec.support.text").read

local ANNOTATIONS = read("types/vmpool.lua")

-- what the file declares: functions as "<table>.<name>" / "<table>:<name>", fields per class
local declared_functions, fields = {}, {}
local class
for line in ANNOTATIONS:gmatch("[^\n]+") do
  local name = line:match("^function ([%w_.:]+)%(")
  if name then declared_functions[name] = true end
  class = line:match("^%-%-%-@class ([%w_.]+)") or class
  local field = line:match("^%-%-%-@field ([%w_]+)")
  if field then
    fields[class] = fields[class] or {}
    fields[class][field] = true
  end
end

local function public_keys(t)
  local keys = {}
  for k in pairs(t) do
    if type(k) == "string" and k:sub(1, 1) ~= "_" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  return keys
end

local function assert_all(kind, names, is_declared, where)
  local missing = {}
  for _, name in ipairs(names) do
    if not is_declared(name) then missing[#missing + 1] = name end
  end
  assert(#names > 0, "found no " .. kind .. " to check")
  assert(#missing == 0, (where or "types/vmpool.lua") .. " lacks " .. kind .. ": " .. table.concat(missing, ", "))
end

describe("the editor annotations (types/vmpool.lua)", function()
  it("are a LuaLS meta file", function()
    assert.matches("^%-%-%-@meta vmpool\n", ANNOTATIONS)
  end)

  it("declare every function of the module and every other field", function()
    local functions, others = {}, {}
    for _, k in ipairs(public_keys(vmpool)) do
      if type(vmpool[k]) == "function" then functions[#functions + 1] = k else others[#others + 1] = k end
    end
    assert_all("module functions", functions, function(k) return declared_functions["vmpool." .. k] end)
    others[#others + 1] = "_VERSION"
    assert_all("module fields", others, function(k) return fields.vmpool[k] end)
  end)

  it("declare every pool method and every stats() field", function()
    local pool = vmpool.new { core = 1 }
    local methods = public_keys(getmetatable(pool).__index)
    local stats = public_keys(pool:stats())
    pool:close()
    assert_all("pool methods", methods, function(k) return declared_functions["Pool:" .. k] end)
    assert_all("stats() fields", stats, function(k) return fields["vmpool.Stats"][k] end)
  end)

  it("declare every future method", function()
    local pool = vmpool.new { core = 1 }
    pool:compile("c", "function f() return 1 end")
    local fut = pool:submit("c", "f")
    fut:wait()
    local methods = public_keys(getmetatable(fut).__index)
    pool:close()
    assert_all("future methods", methods, function(k) return declared_functions["Future:" .. k] end)
  end)

  it("declare every option vmpool.new accepts (the list its unknown-option error gives)", function()
    local _, err = pcall(vmpool.new, { no_such_option = 1 })
    local list = assert(err:match("known options: ([%w_, ]+)%)"), "no option list in: " .. err)
    local options = {}
    for name in list:gmatch("[%w_]+") do options[#options + 1] = name end
    assert_all("vmpool.new options", options, function(k) return fields["vmpool.Options"][k] end)
  end)

  it("and so does the README's option table", function()
    local _, err = pcall(vmpool.new, { no_such_option = 1 })
    local list = assert(err:match("known options: ([%w_, ]+)%)"), "no option list in: " .. err)
    local readme = read("README.md")
    local options = {}
    for name in list:gmatch("[%w_]+") do options[#options + 1] = name end
    assert_all("rows of the vmpool.new option table", options,
      function(k) return readme:find("\n| `" .. k .. "` |", 1, true) end, "README.md")
  end)

  -- vmpool.ngx exists only inside nginx: read its exports from its source instead
  it("declare every function and setting of vmpool.ngx (src/lua/ngx.lua)", function()
    local source = read("src/lua/ngx.lua")
    local functions = {}
    for name in source:gmatch("\nfunction A%.([%w_]+)%(") do
      if name:sub(1, 1) ~= "_" then functions[#functions + 1] = name end
    end
    assert_all("vmpool.ngx functions", functions, function(k) return declared_functions["ngx_adapter." .. k] end)
    local settings = {}
    local config = assert(source:match("\nlocal config = (%b{})"), "no config table in ngx.lua")
    for name in config:gmatch("\n  ([%w_]+) = ") do
      settings[#settings + 1] = name
    end
    assert_all("vmpool.ngx.configure settings", settings, function(k) return fields["vmpool.ngx.Options"][k] end)
  end)

  -- each adapter's file declares what require returns (loaded where the loop is installed)
  for _, adapter in ipairs { { "luv", "luv", "luv_adapter" }, { "cqueues", "cqueues", "cqueues_adapter" } } do
    local name, loop, table_name = adapter[1], adapter[2], adapter[3]
    local path = "types/vmpool/" .. name .. ".lua"
    local has_loop = pcall(require, loop)
    local it_or_pending = has_loop and it or pending
    it_or_pending("declare every function and field of vmpool." .. name .. " (" .. path .. ")", function()
      local text = read(path)
      assert.matches("^%-%-%-@meta vmpool%." .. name .. "\n", text)
      local module = require("vmpool." .. name)
      local functions, others = {}, {}
      for _, k in ipairs(public_keys(module)) do
        if type(module[k]) == "function" then functions[#functions + 1] = k else others[#others + 1] = k end
      end
      assert_all("vmpool." .. name .. " functions", functions,
        function(k) return text:find("\nfunction " .. table_name .. "." .. k .. "(", 1, true) end, path)
      -- on_error is nil by default, so pairs does not see it
      if name == "luv" then others[#others + 1] = "on_error" end
      if #others > 0 then
        assert_all("vmpool." .. name .. " fields", others,
          function(k) return text:find("\n---@field " .. k .. "%??%s") end, path)
      end
    end)
  end
end)
