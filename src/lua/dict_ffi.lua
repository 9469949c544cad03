-- The LuaJIT FFI path of vmpool.shared, compiled into the library and run by vmpool.lua on LuaJIT
-- (see src/host/dict/luajit.rs for why). Given the library's native table, it returns a function
-- that vmpool.shared passes each new handle through: the first one's methods table gets FFI
-- versions of get, get_stale, set, safe_set, add, safe_add, replace, delete, incr and flush_all.
--
-- Each FFI method handles the common case (a handle of this module, a string key, a value and
-- options of the right types) and hands anything else to the method's C function, unchanged:
-- the C functions keep every error message and every rare case (lists, fork, refused memory).
-- Handles are recognised by a weak table of the ones vmpool.shared returned, which maps each
-- handle (a table, as ngx.shared.DICT is) to the userdata in its slot 1, so a value of any other
-- type never reaches the C side as a pointer.

local native = ...

local ffi = require "ffi"
local path = native._library_path
if not path then
  return nil, "the library's path is unknown"
end

local declared = pcall(ffi.cdef, [[
  typedef struct { double num; double len; uint32_t flags; int stale; } vmpool_dict_value;
  typedef struct { const char *err; double errlen; int forcible; } vmpool_dict_store_out;
  typedef struct { double num; const char *err; double errlen; int forcible; } vmpool_dict_incr_out;
  int vmpool_dict_incr(void *ud, const char *key, size_t klen, double value, int has_init,
                       double init, double init_ttl, vmpool_dict_incr_out *out);
  int vmpool_dict_flush_all(void *ud);
  int vmpool_dict_get(void *ud, const char *key, size_t klen, int stale, char *buf, size_t cap,
                      vmpool_dict_value *out);
  int vmpool_dict_store(void *ud, int mode, int safe, const char *key, size_t klen, int vtype,
                        double num, const char *s, size_t slen, double exptime, double flags,
                        vmpool_dict_store_out *out);
]])
if not declared then
  return nil, "the FFI declarations clash with ones already made"
end
local loaded, C = pcall(ffi.load, path)
if not loaded then
  return nil, tostring(C)
end

local type, setmetatable, rawget, rawset, pairs, tonumber = type, setmetatable, rawget, rawset, pairs, tonumber
local ffi_string, ffi_new = ffi.string, ffi.new

-- the codes of host/dict/luajit.rs
local MISSING, FALSE, TRUE, NUMBER, STRING, STRING_TOO_LONG = 0, 1, 2, 3, 4, 5
local VALUE_NIL, VALUE_FALSE, VALUE_TRUE, VALUE_NUMBER, VALUE_STRING = 0, 1, 2, 3, 4
local SET, ADD, REPLACE = 0, 1, 2

local known = setmetatable({}, { __mode = "k" }) -- handle -> its userdata, for each vmpool.shared returned

-- What a call writes into: its out-structures and a buffer for strings, BUFFER_SIZE bytes at
-- first and grown to the longest string read since (as resty.core's string buffer: a loop that
-- reads a long value allocates once, and stays compiled). A call takes the spare scratch and puts it
-- back when it is done: a finalizer that runs in between (at any allocation, ffi.string's
-- included) and uses the dictionary gets a scratch of its own instead of overwriting the bytes
-- or fields that the interrupted call has not read yet.
local BUFFER_SIZE = 4096
local function new_scratch()
  return {
    buf = ffi_new("char[?]", BUFFER_SIZE),
    cap = BUFFER_SIZE,
    value = ffi_new("vmpool_dict_value"),
    store = ffi_new("vmpool_dict_store_out"),
    incr = ffi_new("vmpool_dict_incr_out"),
  }
end
local spare = new_scratch()

local function take()
  local sc = spare
  if sc then
    spare = nil
    return sc
  end
  return new_scratch()
end

local function patch(methods)
  local c_get, c_get_stale = methods.get, methods.get_stale

  -- get and get_stale: value[, flags] and value, flags|nil, stale
  local function getter(c_method, stale)
    return function(self, key)
      local ud = known[self]
      if ud == nil or type(key) ~= "string" then
        return c_method(self, key)
      end
      local sc = take()
      local out, buf, cap = sc.value, sc.buf, sc.cap
      local code = C.vmpool_dict_get(ud, key, #key, stale, buf, cap, out)
      while code == STRING_TOO_LONG do -- again with a buffer of its size (the value may change)
        cap = out.len
        buf = ffi_new("char[?]", cap)
        sc.buf, sc.cap = buf, cap
        code = C.vmpool_dict_get(ud, key, #key, stale, buf, cap, out)
      end
      local flags, is_stale = out.flags, out.stale ~= 0
      local v
      if code == STRING then
        v = ffi_string(buf, out.len)
      elseif code == NUMBER then
        v = out.num
      elseif code == TRUE then
        v = true
      elseif code == FALSE then
        v = false
      elseif code ~= MISSING then -- FALLBACK (-1)
        spare = sc
        return c_method(self, key)
      end
      spare = sc
      if v == nil then
        return nil
      end
      if stale == 0 then
        if flags ~= 0 then
          return v, flags
        end
        return v
      end
      return v, flags ~= 0 and flags or nil, is_stale
    end
  end
  methods.get = getter(c_get, 0)
  methods.get_stale = getter(c_get_stale, 1)

  -- the writes: true, nil, forcible | false, err, forcible (delete: a set of nil)
  local function writer(c_method, mode, safe)
    return function(self, key, value, exptime, flags)
      local ud = known[self]
      if ud == nil or type(key) ~= "string" then
        return c_method(self, key, value, exptime, flags)
      end
      local tv, vtype, num, s, slen = type(value), VALUE_NIL, 0, nil, 0
      if tv == "string" then
        vtype, s, slen = VALUE_STRING, value, #value
      elseif tv == "number" then
        vtype, num = VALUE_NUMBER, value
      elseif value == true then
        vtype = VALUE_TRUE
      elseif value == false then
        vtype = VALUE_FALSE
      elseif value ~= nil then
        return c_method(self, key, value, exptime, flags)
      end
      if exptime == nil then
        exptime = 0
      elseif type(exptime) ~= "number" then
        return c_method(self, key, value, exptime, flags)
      end
      if flags == nil then
        flags = 0
      elseif type(flags) ~= "number" then
        return c_method(self, key, value, exptime, flags)
      end
      local sc = take()
      local out = sc.store
      local code = C.vmpool_dict_store(ud, mode, safe, key, #key, vtype, num, s, slen, exptime, flags, out)
      local evicted = out.forcible ~= 0
      if code == 1 then
        spare = sc
        return true, nil, evicted
      elseif code == 0 then
        -- read before the scratch goes back (a static message: nothing can change the bytes);
        -- the pointer field is boxed, so the common path above does not read it
        local err, errlen = out.err, out.errlen
        spare = sc
        return false, ffi_string(err, errlen), evicted
      end
      spare = sc
      return c_method(self, key, value, exptime, flags) -- FALLBACK (-1)
    end
  end
  methods.set = writer(methods.set, SET, 0)
  methods.safe_set = writer(methods.safe_set, SET, 1)
  methods.add = writer(methods.add, ADD, 0)
  methods.safe_add = writer(methods.safe_add, ADD, 1)
  methods.replace = writer(methods.replace, REPLACE, 0)
  local c_delete = methods.delete
  methods.delete = function(self, key)
    local ud = known[self]
    if ud == nil or type(key) ~= "string" then
      return c_delete(self, key)
    end
    local sc = take()
    local code = C.vmpool_dict_store(ud, SET, 0, key, #key, VALUE_NIL, 0, nil, 0, 0, 0, sc.store)
    spare = sc
    if code == 1 then
      return true, nil, false
    end
    return c_delete(self, key)
  end

  -- incr: value[, nil, forcible] | nil, err. As resty.core's, a value that is not a number goes
  -- through tonumber; one that does not convert, init and init_ttl of other types, NaN and the
  -- other refusals go to the C function, which raises ngx's words or the vmpool: error.
  local c_incr = methods.incr
  methods.incr = function(self, key, value, init, init_ttl)
    local ud = known[self]
    if ud == nil or type(key) ~= "string" or (init ~= nil and type(init) ~= "number")
      or (init_ttl ~= nil and (type(init_ttl) ~= "number" or init == nil)) then
      return c_incr(self, key, value, init, init_ttl)
    end
    local num = value
    if type(num) ~= "number" then
      num = tonumber(num)
      if num == nil then
        return c_incr(self, key, value, init, init_ttl)
      end
    end
    local sc = take()
    local out = sc.incr
    local code = C.vmpool_dict_incr(ud, key, #key, num, init and 1 or 0, init or 0, init_ttl or 0, out)
    if code == 1 then
      local n, evicted = out.num, out.forcible ~= 0
      spare = sc
      if init == nil then
        return n
      end
      return n, nil, evicted
    elseif code == 0 then
      local err, errlen = out.err, out.errlen
      spare = sc
      return nil, ffi_string(err, errlen)
    end
    spare = sc
    return c_incr(self, key, value, init, init_ttl) -- FALLBACK (-1)
  end

  local c_flush_all = methods.flush_all
  methods.flush_all = function(self)
    local ud = known[self]
    if ud == nil or C.vmpool_dict_flush_all(ud) ~= 0 then
      return c_flush_all(self)
    end
  end
end

-- vmpool.shared passes each handle it returns through this.
local methods
return function(handle)
  if known[handle] == nil then
    known[handle] = rawget(handle, 1)
    if not methods then
      -- the metatable is hidden from getmetatable (__metatable = false)
      methods = debug.getmetatable(handle).__index
      patch(methods)
    end
    -- the handle carries the methods as its own fields too (host/dict/mod.rs): the FFI ones
    for name, f in pairs(methods) do
      rawset(handle, name, f)
    end
  end
  return handle
end
