-- The release rockspec stays in step with Cargo.toml and with the development rockspec: a version
-- bump that forgets one of them, or a build change made in one rockspec only, fails here.
local vmpool = require "vmpool"

local read = require("spec.support.text").read

-- a rockspec is Lua assigning globals: run it in an empty environment and return that
local function load_rockspec(path)
  local env = {}
  local chunk
  if setfenv then
    chunk = assert(loadstring(read(path), "=" .. path))
    setfenv(chunk, env)
  else
    chunk = assert(load(read(path), "=" .. path, "t", env))
  end
  chunk()
  return env
end

local function same(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local CARGO_VERSION = assert(read("Cargo.toml"):match('\nversion = "([^"]+)"'), "no version in Cargo.toml")
local RELEASE = "rockspec/vmpool-" .. CARGO_VERSION .. "-1.rockspec"

describe("the release", function()
  it("has a rockspec named after the version in Cargo.toml, with that version inside", function()
    local spec = load_rockspec(RELEASE)
    assert.are.equal("vmpool", spec.package)
    assert.are.equal(CARGO_VERSION .. "-1", spec.version)
  end)

  it("takes its source from the tarball make dist writes for that version", function()
    local spec = load_rockspec(RELEASE)
    local tarball = "vmpool-" .. CARGO_VERSION .. ".tar.gz"
    assert.are.equal(tarball, spec.source.url:match("[^/]+$"))
    assert.are.equal("vmpool-" .. CARGO_VERSION, spec.source.dir)
  end)

  it("builds, installs and depends exactly as the development rockspec does", function()
    local release, scm = load_rockspec(RELEASE), load_rockspec("rockspec/vmpool-scm-1.rockspec")
    assert.is_true(same(scm.dependencies, release.dependencies), "dependencies differ")
    assert.are.equal(scm.build.build_command, release.build.build_command)
    assert.is_true(same(scm.build.install, release.build.install), "build.install differs")
    assert.is_true(same(scm.build.copy_directories, release.build.copy_directories), "copy_directories differ")
  end)

  it("promises in the README the oldest glibc that make dist holds the binary rock to", function()
    local claim = assert(read("scripts/dist.sh"):match("\nGLIBC_CLAIM=([%d.]+)\n"), "no GLIBC_CLAIM in scripts/dist.sh")
    local readme = read("README.md")
    for _, words in ipairs { "glibc " .. claim .. " or newer", "glibc " .. claim .. " is the oldest" } do
      assert.truthy(readme:find(words, 1, true), "README.md does not say '" .. words .. "'")
    end
  end)

  it("is the version the loaded module reports", function()
    assert.are.equal(CARGO_VERSION, vmpool._VERSION)
  end)
end)
