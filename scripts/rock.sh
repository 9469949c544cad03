#!/bin/sh
# Builds and installs the rock with LuaRocks into lua_modules/<LUA>/ (one tree per runtime: PUC 5.1
# and LuaJIT both install into lib/lua/5.1, so sharing a tree would let the last install win).
# Usage: scripts/rock.sh lua5.1|lua5.2|lua5.3|lua5.4|luajit
set -eu
cd "$(dirname "$0")/.."
LUA=${1:-lua5.4}
. scripts/luaenv.sh
mkdir -p "$VMPOOL_TREE"
if [ "$LUA" = luajit ]; then
  # LuaRocks 3.8 knows LuaJIT as a 5.1 interpreter with its own headers; keep that configuration
  # inside the project instead of the user's home.
  cat > "$VMPOOL_TREE/config.lua" <<CFG
lua_interpreter = "luajit"
variables = {
  LUA_DIR = "/usr",
  LUA_BINDIR = "/usr/bin",
  LUA_INCDIR = "/usr/include/luajit-2.1",
}
CFG
  export LUAROCKS_CONFIG="$PWD/$VMPOOL_TREE/config.lua"
fi
luarocks --lua-version="$VMPOOL_LUA_VERSION" --tree "$VMPOOL_TREE" make rockspec/vmpool-scm-1.rockspec >"$VMPOOL_TREE/build.log" 2>&1 || {
  cat "$VMPOOL_TREE/build.log" >&2
  echo "vmpool: luarocks make failed for $LUA (log above)" >&2
  exit 1
}
echo "vmpool: installed for $LUA into $VMPOOL_TREE"
