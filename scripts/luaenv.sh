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

# vmpool_luarocks_config DIR: writes DIR/config.lua for the tree DIR and points LUAROCKS_CONFIG at
# it (inside the project, not the user's home). LuaRocks 3.8 knows LuaJIT as a 5.1 interpreter
# with its own headers; and Debian's lua-busted is declared as provided, so that `luarocks test`
# finds its test dependency without the LuaRocks server.
vmpool_luarocks_config() {
  busted_version=$(dpkg-query -W -f='${Version}' lua-busted 2>/dev/null | sed 's/^[0-9]*://; s/[-+~].*//') || true
  {
    if [ -n "$busted_version" ]; then echo "rocks_provided = { busted = \"$busted_version-1\" }"; fi
    if [ "$LUA" = luajit ]; then
      cat <<CFG
lua_interpreter = "luajit"
variables = {
  LUA_DIR = "/usr",
  LUA_BINDIR = "/usr/bin",
  LUA_INCDIR = "/usr/include/luajit-2.1",
}
CFG
    fi
  } > "$1/config.lua"
  LUAROCKS_CONFIG="$1/config.lua"
  export LUAROCKS_CONFIG
}
