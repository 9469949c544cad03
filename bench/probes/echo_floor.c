/* The floor under the 10-field echo (bench/suites/cg.lua --kind=echo10) through Lua's C API:
 * what the table work alone costs when one call's table crosses to a state and back, with no
 * pool, no threads, no message and no copy of any string. Per call it walks the host's table
 * with lua_next (reading each key and value as a codec must), builds the same table in a second
 * state (lua_createtable presized, lua_pushlstring, lua_rawset), walks that one and builds the
 * result in the host: the four table passes an echo cannot skip. echo()'s third argument
 * "constructor" builds through a Lua function compiled once for the keys instead.
 *
 * Built and run by bench/probes/echo_floor.sh (callgrind at two call counts, the difference per
 * call); loaded by the runtime measured, so the C API is that runtime's own code. */
#include <lua.h>
#include <lauxlib.h>
#include <stddef.h>

#define MAXF 16

typedef struct {
  const char *k;
  size_t klen;
  int t;
  int isint;
  lua_Integer i;
  lua_Number n;
  const char *s;
  size_t slen;
} field;

/* Reads the table at stack slot idx of L into f; returns the field count (or -1 if it is not a
 * 10-field-at-most table of string keys and scalar values: the probe's table always is). */
static int walk(lua_State *L, int idx, field *f) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (n == MAXF || lua_type(L, -2) != LUA_TSTRING) {
      lua_pop(L, 2);
      return -1;
    }
    f[n].k = lua_tolstring(L, -2, &f[n].klen);
    f[n].t = lua_type(L, -1);
    switch (f[n].t) {
    case LUA_TNUMBER:
#if LUA_VERSION_NUM >= 503
      f[n].isint = lua_isinteger(L, -1);
      if (f[n].isint)
        f[n].i = lua_tointegerx(L, -1, NULL);
      else
#endif
        f[n].n = lua_tonumber(L, -1);
      break;
    case LUA_TSTRING:
      f[n].s = lua_tolstring(L, -1, &f[n].slen);
      break;
    case LUA_TBOOLEAN:
      f[n].isint = lua_toboolean(L, -1);
      break;
    default:
      lua_pop(L, 2);
      return -1;
    }
    n++;
    lua_pop(L, 1);
  }
  return n;
}

/* Pushes the value of field f. */
static void push_value(lua_State *L, const field *f) {
  switch (f->t) {
  case LUA_TNUMBER:
#if LUA_VERSION_NUM >= 503
    if (f->isint)
      lua_pushinteger(L, f->i);
    else
#endif
      lua_pushnumber(L, f->n);
    break;
  case LUA_TSTRING:
    lua_pushlstring(L, f->s, f->slen);
    break;
  default:
    lua_pushboolean(L, f->isint);
  }
}

/* Pushes onto L a new table of the n fields f. The strings f points to stay alive: they belong
 * to the table walked last, still on its state's stack. */
static void build(lua_State *L, const field *f, int n) {
  lua_createtable(L, 0, n);
  for (int j = 0; j < n; j++) {
    lua_pushlstring(L, f[j].k, f[j].klen);
    push_value(L, &f[j]);
    lua_rawset(L, -3);
  }
}

/* Pushes the values of the n fields f, for a constructor. */
static void push_values(lua_State *L, const field *f, int n) {
  for (int j = 0; j < n; j++)
    push_value(L, &f[j]);
}

/* The other way to build: a Lua function compiled once for the table's keys,
 * `local v1, ..., vn = ... return { [k1] = v1, ..., [kn] = vn }`, called with the values (its
 * keys are constants of the function: nothing is interned per call). Leaves it on L's stack at
 * slot 1 (in the host after the table). The probe's keys are identifiers. */
static void load_constructor(lua_State *L, const field *f, int n) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addstring(&b, "local v1");
  for (int j = 1; j < n; j++) {
    lua_pushfstring(L, ", v%d", j + 1);
    luaL_addvalue(&b);
  }
  luaL_addstring(&b, " = ... return {");
  for (int j = 0; j < n; j++) {
    lua_pushfstring(L, "%s = v%d, ", f[j].k, j + 1);
    luaL_addvalue(&b);
  }
  luaL_addstring(&b, "}");
  luaL_pushresult(&b);
  if (luaL_loadstring(L, lua_tostring(L, -1)) != 0)
    lua_error(L);
  lua_remove(L, -2);
}

/* echo(t, calls [, "constructor"]): the four passes, calls times; returns the last result's
 * field count. With "constructor" the two builds call a function compiled once for the keys
 * instead of lua_pushlstring and lua_rawset per field. */
static int echo(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer calls = luaL_checkinteger(L, 2);
  int ctor = lua_isstring(L, 3) && lua_tostring(L, 3)[0] == 'c';
  lua_State *S = luaL_newstate();
  field in[MAXF], out[MAXF];
  int n = 0, top;
  if (S == NULL)
    return luaL_error(L, "echo_floor: no memory for the second state");
  lua_settop(L, 1);
  if (ctor) {
    n = walk(L, 1, in);
    if (n < 0)
      return luaL_error(L, "echo_floor: a table of string keys and scalar values, please");
    load_constructor(L, in, n); /* host: slot 2 */
    load_constructor(S, in, n); /* state: slot 1 */
  }
  top = lua_gettop(L);
  for (lua_Integer c = 0; c < calls; c++) {
    n = walk(L, 1, in);              /* the host encodes the argument */
    if (n < 0)
      break;
    if (ctor) {                      /* the state decodes it */
      lua_pushvalue(S, 1);
      push_values(S, in, n);
      lua_call(S, n, 1);
    } else {
      build(S, in, n);
    }
    n = walk(S, lua_gettop(S), out); /* the state encodes its result, the same table */
    if (ctor) {                      /* the host decodes the result */
      lua_pushvalue(L, 2);
      push_values(L, out, n);
      lua_call(L, n, 1);
    } else {
      build(L, out, n);
    }
    lua_settop(S, ctor);
    lua_settop(L, top);
  }
  lua_close(S);
  lua_pushinteger(L, n);
  return 1;
}

int luaopen_echo_floor(lua_State *L) {
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, echo);
  lua_setfield(L, -2, "echo");
  return 1;
}
