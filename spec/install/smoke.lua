-- The smoke test of an installed rock (scripts/install-check.sh), run by the plain interpreter with
-- only the fresh tree before the system's directories on the C path:
--   lua smoke.lua VERSION RUNTIME   (RUNTIME as vmpool.runtime says it: "Lua 5.1", "LuaJIT", ...)
-- invoke, submit, co_invoke under vmpool.run, and co_invoke through the cqueues adapter (Debian's
-- lua-cqueues for every runtime here); luv's adapter too where luv is installed.
local version, runtime = assert(arg[1], "usage: smoke.lua VERSION RUNTIME"), assert(arg[2])

-- an error raised inside the module's opening reaches the caller (in the binary rock it passes
-- through the loader's frames: LuaJIT unwinds through them): vmpool.luv without luv
package.preload.luv = function() error("hidden by the smoke test") end
local ok, err = pcall(require, "vmpool.luv")
assert(not ok and err:find("vmpool: vmpool.luv needs the luv module", 1, true),
  "require 'vmpool.luv': " .. tostring(err))
-- (Lua 5.1 and LuaJIT leave a failed module's sentinel in package.loaded)
package.preload.luv, package.loaded.luv, package.loaded["vmpool.luv"] = nil, nil, nil

local vmpool = require "vmpool"
assert(vmpool._VERSION == version, "installed version " .. tostring(vmpool._VERSION) .. ", expected " .. version)
assert(vmpool.runtime == runtime, "vmpool.runtime is " .. tostring(vmpool.runtime) .. ", expected " .. runtime)

local pool = vmpool.new { core = 2 }
pool:compile("check", [[
function add(a, b) return a + b end
function runtime() return jit and "LuaJIT" or _VERSION end
]])
assert(pool:invoke("check", "add", 2, 3) == 5, "pool:invoke")
local child = pool:invoke("check", "runtime")
assert(child == runtime, "the pool states run " .. tostring(child))
local fut = pool:submit("check", "add", 4, 5)
assert(fut:wait() == 9, "pool:submit, fut:wait")

local got = {}
local run_result = vmpool.run(function()
  vmpool.spawn(function() got.spawned = pool:co_invoke("check", "add", 10, 1) end)
  return pool:co_invoke("check", "add", 6, 7)
end)
assert(run_result == 13 and got.spawned == 11, "co_invoke under vmpool.run")

local vcq = require "vmpool.cqueues"
local cq = require("cqueues").new()
cq:wrap(function() got.cqueues = pool:co_invoke("check", "add", 3, 4) end)
assert(cq:loop())
assert(got.cqueues == 7 and vcq.stats().resumes == 1, "vmpool.cqueues: " .. tostring(got.cqueues))
local adapters = "vmpool.cqueues"

if pcall(require, "luv") then
  local vluv = require "vmpool.luv"
  vluv.spawn(function() got.luv = pool:co_invoke("check", "add", 1, 2) end)
  vluv.loop.run()
  assert(got.luv == 3 and vluv.stats().resumes == 1, "vmpool.luv: " .. tostring(got.luv))
  adapters = adapters .. ", vmpool.luv"
end

-- vmpool.shared: a pool state's require "vmpool" finds the same library through the loader, so it
-- sees the host's dictionary; on LuaJIT the methods take the FFI path, which loads the build by
-- its own path
local dict = vmpool.shared("smoke")
assert(dict:set("n", 41))
pool:compile("dict", [[function bump() return require("vmpool").shared("smoke"):incr("n", 1) end]])
assert(pool:invoke("dict", "bump") == 42 and dict:get("n") == 42, "vmpool.shared between host and pool state")
if runtime == "LuaJIT" then assert(vmpool._dict_ffi == true, "the FFI path: " .. tostring(vmpool._dict_ffi)) end

pool:close()
print(("vmpool %s on %s: invoke, submit, co_invoke under vmpool.run and through %s, vmpool.shared work"):format(
  vmpool._VERSION, vmpool.runtime, adapters))
