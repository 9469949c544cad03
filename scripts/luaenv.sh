# Sourced with LUA set (lua5.1, lua5.2, lua5.3, lua5.4 or luajit): sets VMPOOL_TREE,
# VMPOOL_LUA_VERSION and a LUA_CPATH that finds the rock installed in lua_modules/<LUA>/ before
# anything else, and defines vmpool_luarocks_config.
case "$LUA" in
  lua5.1|luajit) VMPOOL_LUA_VERSION=5.1 ;;
  lua5.2|lua5.3|lua5.4) VMPOOL_LUA_VERSION=${LUA#lua} ;;
  *) echo "vmpool: LUA must be lua5.1, lua5.2, lua5.3, lua5.4 or luajit (got '$LUA')" >&2; exit 1 ;;
esac
VMPOOL_TREE="lua_modules/$LUA"
LUA_CPATH="$PWD/$VMPOOL_TREE/lib/lua/$VMPOOL_LUA_VERSION/?.so;;"
unset LUA_CPATH_5_2 LUA_CPATH_5_3 LUA_CPATH_5_4 LUA_INIT LUA_INIT_5_2 LUA_INIT_5_3 LUA_INIT_5_4 2>/dev/null || true
export VMPOOL_TREE VMPOOL_LUA_VERSION LUA_CPATH

# vmpool_luarocks_config DIR: for LuaJIT, writes DIR/config.lua and points LUAROCKS_CONFIG at it.
# LuaRocks 3.8 knows LuaJIT as a 5.1 interpreter with its own headers; keep that configuration
# with the tree instead of the user's home. Other runtimes need none.
vmpool_luarocks_config() {
  [ "$LUA" = luajit ] || return 0
  cat > "$1/config.lua" <<CFG
lua_interpreter = "luajit"
variables = {
  LUA_DIR = "/usr",
  LUA_BINDIR = "/usr/bin",
  LUA_INCDIR = "/usr/include/luajit-2.1",
}
CFG
  LUAROCKS_CONFIG="$1/config.lua"
  export LUAROCKS_CONFIG
}
