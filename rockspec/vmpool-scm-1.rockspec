-- Builds with plain LuaRocks 3.8 (no rust-mlua build backend needed): the build command asks the
-- target interpreter which runtime it is and builds the matching cargo feature.
rockspec_format = "3.0"
package = "vmpool"
version = "scm-1"
source = {
  url = "git+file:///dev/null", -- `luarocks make` builds the checkout it runs in
}
description = {
  summary = "A pool of child Lua states on OS threads (Lua 5.1 to 5.5, LuaJIT, OpenResty)",
  detailed = [[
vmpool precompiles chunks once, ships the bytecode to a pool of child Lua states running on OS
threads, and dispatches pool:invoke(chunk, fn, ...) to a free state. Core states stay resident,
non-core states are created under load and closed when idle, callers block or fail when the pool
is exhausted, and coroutine-aware variants keep an event loop (OpenResty) free while calls run.
]],
  license = "MIT",
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
