/*
 * A minimal `lua script.lua args...` for profiles: Debian's interpreters are stripped, so callgrind
 * names Lua's internal functions only by address. bench/callgrind links this file with Debian's
 * static Lua library (liblua5.4.a, liblua5.1.a or libluajit-5.1.a, which keep their local
 * symbols) and exports the Lua API to modules (-Wl,-E, --whole-archive), so vmpool.so and its
 * child states run on a Lua whose functions have names. Instruction totals are taken with the
 * stock interpreter; this host only names where they go.
 */
#include <stdio.h>
#include <stdlib.h>

#include "lua.h"
#include "lualib.h"
#include "lauxlib.h"

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  lua_getglobal(L, "debug");
  lua_getfield(L, -1, "traceback");
  lua_pushstring(L, msg ? msg : "(error object is not a string)");
  lua_pushinteger(L, 2);
  lua_call(L, 2, 1);
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L;
  int i, status;
  if (argc < 2) {
    fprintf(stderr, "usage: %s script.lua [args...]\n", argv[0]);
    return 2;
  }
  L = luaL_newstate();
  if (L == NULL) return 1;
  luaL_openlibs(L);
  lua_createtable(L, argc, 0);
  for (i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - 1);
  }
  lua_setglobal(L, "arg");
  lua_pushcfunction(L, traceback);
  status = luaL_loadfile(L, argv[1]);
  if (status == 0) {
    for (i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
    status = lua_pcall(L, argc - 2, 0, 1);
  }
  if (status != 0) {
    fprintf(stderr, "%s: %s\n", argv[0], lua_tostring(L, -1));
  }
  lua_close(L);
  return status == 0 ? 0 : 1;
}
