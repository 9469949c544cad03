# Sourced with LUA set (lua5.1, lua5.2, lua5.3, lua5.4, lua5.5 or luajit): sets VMPOOL_TREE,
# VMPOOL_LUA_VERSION and a LUA_CPATH that finds the rock installed in lua_modules/<LUA>/ before
# anything else, and defines vmpool_luarocks_config. Lua 5.5 is the one scripts/lua55.sh builds
# into target/lua5.5 (Debian 12 has none): its bin/ goes first on PATH, and its LUA_PATH_5_5 and
# LUA_CPATH_5_5 add its C modules and Debian's pure-Lua modules for 5.4 (busted and its
# dependencies), after the copies 5.5 needed rewritten.
case "$LUA" in
  lua5.1|luajit) VMPOOL_LUA_VERSION=5.1 ;;
  lua5.2|lua5.3|lua5.4|lua5.5) VMPOOL_LUA_VERSION=${LUA#lua} ;;
  *) echo "vmpool: LUA must be lua5.1, lua5.2, lua5.3, lua5.4, lua5.5 or luajit (got '$LUA')" >&2; exit 1 ;;
esac
VMPOOL_TREE="lua_modules/$LUA"
LUA_CPATH="$PWD/$VMPOOL_TREE/lib/lua/$VMPOOL_LUA_VERSION/?.so;;"
unset LUA_CPATH_5_2 LUA_CPATH_5_3 LUA_CPATH_5_4 LUA_CPATH_5_5 LUA_PATH_5_5 LUA_INIT LUA_INIT_5_2 LUA_INIT_5_3 LUA_INIT_5_4 \
  LUA_INIT_5_5 2>/dev/null || true
export VMPOOL_TREE VMPOOL_LUA_VERSION LUA_CPATH
if [ "$LUA" = lua5.5 ]; then
  VMPOOL_LUA55="$PWD/target/lua5.5"
  PATH="$VMPOOL_LUA55/bin:$PATH"
  LUA_CPATH_5_5="$PWD/$VMPOOL_TREE/lib/lua/5.5/?.so;$VMPOOL_LUA55/lib/lua/5.5/?.so;;"
  LUA_PATH_5_5="$VMPOOL_LUA55/share/lua/5.5/?.lua;$VMPOOL_LUA55/share/lua/5.5/?/init.lua;/usr/share/lua/5.4/?.lua;/usr/share/lua/5.4/?/init.lua;;"
  export VMPOOL_LUA55 PATH LUA_CPATH_5_5 LUA_PATH_5_5
fi

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
    # LuaRocks 3.8 takes --lua-version=5.5 once it is told where that Lua is
    if [ "$LUA" = lua5.5 ]; then
      cat <<CFG
lua_interpreter = "lua5.5"
variables = {
  LUA_DIR = "$VMPOOL_LUA55",
  LUA_BINDIR = "$VMPOOL_LUA55/bin",
  LUA_INCDIR = "$VMPOOL_LUA55/include",
}
CFG
    fi
  } > "$1/config.lua"
  LUAROCKS_CONFIG="$1/config.lua"
  export LUAROCKS_CONFIG
}
