/* The Lua 5.3 API macros that Lua 5.4 keeps under LUA_COMPAT_5_3 (as Debian builds it) and 5.5
 * dropped, which cqueues still calls; scripts/lua55.sh includes this when it builds cqueues. */
#define luaL_checkint(L, n) ((int)luaL_checkinteger(L, (n)))
#define luaL_optint(L, n, d) ((int)luaL_optinteger(L, (n), (d)))
#define luaL_optunsigned(L, a, d) ((lua_Unsigned)luaL_optinteger(L, a, (lua_Integer)(d)))
#define lua_pushunsigned(L, n) lua_pushinteger(L, (lua_Integer)(n))
