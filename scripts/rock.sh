#!/bin/sh
# Builds and installs the rock with LuaRocks into lua_modules/<LUA>/ (one tree per runtime: PUC 5.1
# and LuaJIT both install into lib/lua/5.1, so sharing a tree would let the last install win).
# Lua 5.5 is the one scripts/lua55.sh builds into target/lua5.5 (run here first).
# Usage: scripts/rock.sh lua5.1|lua5.2|lua5.3|lua5.4|lua5.5|luajit
set -eu
cd "$(dirname "$0")/.."
LUA=${1:-lua5.4}
if [ "$LUA" = lua5.5 ]; then scripts/lua55.sh; fi
. scripts/luaenv.sh
mkdir -p "$VMPOOL_TREE"
vmpool_luarocks_config "$PWD/$VMPOOL_TREE"
luarocks --lua-version="$VMPOOL_LUA_VERSION" --tree "$VMPOOL_TREE" make rockspec/vmpool-scm-1.rockspec >"$VMPOOL_TREE/build.log" 2>&1 || {
  cat "$VMPOOL_TREE/build.log" >&2
  echo "vmpool: luarocks make failed for $LUA (log above)" >&2
  exit 1
}
echo "vmpool: installed for $LUA into $VMPOOL_TREE"
