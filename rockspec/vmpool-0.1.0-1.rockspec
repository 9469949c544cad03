-- The release rockspec. `make dist` packs it with the release tarball into
-- dist/vmpool-0.1.0-1.src.rock (and a manifest), which installs with no clone and no download:
-- the tarball travels inside the rock. Keep `version` in step with Cargo.toml
-- (spec/release_spec.lua checks it).
rockspec_format = "3.0"
package = "vmpool"
version = "0.1.0-1"
source = {
  -- where the release tarball `make dist` writes (dist/vmpool-0.1.0.tar.gz) is published
  url = "https://github.com/vmpool/vmpool/releases/download/v0.1.0/vmpool-0.1.0.tar.gz",
  dir = "vmpool-0.1.0",
}
description = {
  summary = "A pool of child Lua states on OS threads (Lua 5.1 to 5.5, LuaJIT, OpenResty)",
  detailed = [[
vmpool precompiles chunks once, ships the bytecode to a pool of child Lua states running on OS
threads, and dispatches pool:invoke(chunk, fn, ...) to a free state. Core states stay resident,
non-core states are created under load and closed when idle, callers block or fail when the pool
is exhausted, and coroutine-aware variants keep an event loop (OpenResty) free while calls run.
Building needs a Rust toolchain (cargo >= 1.88).
]],
  license = "MIT",
  labels = { "concurrency", "threads", "openresty" },
}
dependencies = {
  "lua >= 5.1, < 5.6",
}
build = {
  type = "command",
  build_command = [[sh rockspec/build.sh "$(LUA)" "$(LUA_INCDIR)"]],
  install = {
    lib = {
      vmpool = "target/rock/vmpool.so",
    },
  },
  -- the editor annotations (LuaLS ---@meta files), kept in the rock's directory:
  -- `luarocks show --rock-dir vmpool`/types
  copy_directories = { "types" },
}
test_dependencies = {
  "busted >= 2.0",
}
test = {
  -- runs the busted suite in spec/ with the interpreter LuaRocks targets (rockspec/test.lua)
  type = "command",
  script = "rockspec/test.lua",
}
