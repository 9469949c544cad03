/* system.core for the Lua 5.5 that scripts/lua55.sh builds: the three functions busted takes from
 * luasystem (Debian's lua-system), whose source package the Debian mirror did not serve (its
 * files answered 404): gettime (wall clock, seconds), monotime (monotonic clock, seconds) and
 * sleep(seconds). Debian's system/init.lua (require "system.core") goes on top unchanged. */
#include <errno.h>
#include <time.h>

#include "lauxlib.h"
#include "lua.h"

static double seconds(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int gettime(lua_State *L) {
  lua_pushnumber(L, seconds(CLOCK_REALTIME));
  return 1;
}

static int monotime(lua_State *L) {
  lua_pushnumber(L, seconds(CLOCK_MONOTONIC));
  return 1;
}

static int sleep_for(lua_State *L) {
  double s = luaL_checknumber(L, 1);
  struct timespec t;
  if (!(s > 0)) return 0;
  t.tv_sec = (time_t)s;
  t.tv_nsec = (long)((s - (double)t.tv_sec) * 1e9);
  while (nanosleep(&t, &t) == -1 && errno == EINTR) {
  }
  return 0;
}

static const luaL_Reg functions[] = {
    {"gettime", gettime}, {"monotime", monotime}, {"sleep", sleep_for}, {NULL, NULL}};

int luaopen_system_core(lua_State *L) {
  luaL_newlib(L, functions);
  return 1;
}
