-- The `ngx` of a pool state inside nginx, compiled into the library and run by
-- vmpool._ngx_state() (src/host/ngx_state_api.rs) with a table ngx_lua's own C functions have
-- filled: encode_args, decode_args, quote_sql_str, hmac_sha1, ngx.config, ngx.shared (the
-- worker's shared memory zones), ngx.null and the host's constants (OK, ERROR, AGAIN, DONE,
-- DECLINED and every HTTP_* method and status, by the very C functions that set the host's).
-- This adds what lua-resty-core's FFI modules give (they resolve in the worker process, where
-- every pool state lives) and what needs no request:
--
--   thread-safe because...                      functions
--   pure computation                            encode_base64, decode_base64, md5, md5_bin,
--                                               sha1_bin, crc32_short, crc32_long, escape_uri,
--                                               unescape_uri, encode_args, decode_args,
--                                               quote_sql_str, hmac_sha1, http_time, cookie_time,
--                                               parse_http_time, config.*
--   the zone's own lock (shared memory mutex)   ngx.shared.DICT:* (what run_worker_thread's VMs use)
--   reads of nginx's cached time / process      now, time, today, localtime, utctime,
--   data that only the main thread writes       worker.pid, worker.id, worker.count, worker.exiting
--   one write(2) to the error log               log (with a prefix naming the state)
--   constants                                   OK, ERROR, AGAIN, DONE, DECLINED, HTTP_*, the log
--                                               levels, null
--
-- require of lua-resty-core's modules: ngx.base64 and resty.core.utils (pure computation) load as
-- usual, resty.core gives what is loaded here, ngx.errlog / ngx.ssl / ngx.ocsp keep their
-- request-free functions, and the rest raises (MODULES below).
--
-- What needs a request or the event loop raises "vmpool: ngx.X is not available in a pool state",
-- when read and when assigned; so does require of the lua-resty-core modules that need them
-- (MODULES below).
-- luacheck: globals ngx

local ngx = ...
_G.ngx = ngx

local ffi = require "ffi"
local C = ffi.C

for _, name in ipairs { "resty.core.hash", "resty.core.base64", "resty.core.uri", "resty.core.time",
  "resty.core.worker", "resty.core.shdict" } do
  require(name)
end

-- writes the cached time: only the event loop may
ngx.update_time = nil

-- the log levels (NGX_LOG_*; ngx_lua sets them with a static function, so they are written out)
local LEVELS = { "STDERR", "EMERG", "ALERT", "CRIT", "ERR", "WARN", "NOTICE", "INFO", "DEBUG" }
for i, name in ipairs(LEVELS) do ngx[name] = i - 1 end

ffi.cdef [[
int ngx_http_lua_ffi_raw_log(void *r, int level, const unsigned char *s, size_t s_len);
]]

local select, tostring, type, error, concat = select, tostring, type, error, table.concat
local prefix = "[vmpool state " .. (tostring(ngx):match("0x%x+") or "?") .. "] "

--- ngx.log(level, ...): like the host's, to the worker's error log, prefixed with the state.
function ngx.log(level, ...)
  if type(level) ~= "number" or level < 0 or level > 8 or level % 1 ~= 0 then
    error("vmpool: bad argument #1 to 'ngx.log': expected a log level (ngx.ERR, ngx.INFO, ...), got "
      .. tostring(level), 0)
  end
  local parts = { prefix }
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    local t = type(v)
    if t == "string" or t == "number" or t == "boolean" or t == "nil" then
      parts[#parts + 1] = tostring(v)
    elseif v == ngx.null then
      parts[#parts + 1] = "null"
    elseif getmetatable(v) and getmetatable(v).__tostring then
      parts[#parts + 1] = tostring(v)
    else
      error("vmpool: bad argument #" .. (i + 1) .. " to 'ngx.log' (string, number, boolean, or nil expected, got "
        .. t .. ")", 0)
    end
  end
  local s = concat(parts)
  C.ngx_http_lua_ffi_raw_log(nil, level, s, #s)
end

-- print(...), as in ngx_lua: ngx.log(ngx.NOTICE, ...), so that code written for the event loop
-- logs the same way here (Lua's own print wrote to the worker's stdout, which nginx discards)
local NOTICE, log = ngx.NOTICE, ngx.log
_G.print = function(...)
  log(NOTICE, ...)
end

-- the parts of ngx that need a request or the event loop
local UNAVAILABLE = {}
for _, name in ipairs {
  "say", "print", "echo", "flush", "eof", "exit", "exec", "redirect", "send_headers", "status", "header", "req",
  "resp", "var", "ctx", "arg", "location", "sleep", "timer", "socket", "thread", "semaphore", "on_abort",
  "is_subrequest", "headers_sent", "get_phase", "get_raw_phase", "re", "run_worker_thread", "update_time",
  "ocsp", "balancer", "ssl", "pipe", "process",
} do
  UNAVAILABLE[name] = true
end

-- the one error of everything a pool state lacks: `what` and why, with what to do instead
local function not_available(what, why)
  error("vmpool: " .. what .. " is not available in a pool state (" .. why .. ")", 0)
end

local function unavailable(key)
  not_available("ngx." .. tostring(key), "it needs a request or the nginx event loop; call it in the request "
    .. "and pass the result to the pool")
end

-- Reading a name of the list raises, and so does assigning it (ngx.status = 201, ngx.header = ...):
-- in the event loop that would act on the response, here it would only hide the value. Any other
-- new field is stored, as in a plain table (event-loop code caches things on ngx), and the
-- fields that are there can be replaced.
setmetatable(ngx, {
  __index = function(_, key)
    if UNAVAILABLE[key] then unavailable(key) end
    return nil
  end,
  __newindex = function(t, key, value)
    if UNAVAILABLE[key] then unavailable(key) end
    rawset(t, key, value)
  end,
})

-- lua-resty-core's modules, for require in a pool state. Those that need a request or the event
-- loop raise instead of loading (most would fail on ngx.X anyway, some would load and then touch
-- the worker's memory from this thread); in those marked `keep`, only the functions listed
-- stay (thread-safe and request-free), the others raise. Each reason says why and what to do.
local ON_REQUEST = "it works on the current request; call it in the request and pass the result to the pool"
local MODULES = {
  ["ngx.semaphore"] = "its semaphores live in the worker's memory, which the event loop uses without a lock, "
    .. "and waiting on one parks a request; wait in the request (pool:co_invoke yields it until the call is "
    .. "done) and share data between states with ngx.shared or vmpool.shared",
  ["ngx.pipe"] = "its processes are driven by the worker's event loop; spawn them in the request or a timer "
    .. "and pass their output to the pool",
  ["ngx.process"] = "it acts on the worker process from the event loop (enable_privileged_agent only in init, "
    .. "signal_graceful_exit); read ngx.process.type() or get_master_pid() in the request and pass them to "
    .. "the pool",
  ["ngx.balancer"] = "it sets the upstream peer of the current request in balancer_by_lua; call it there",
  ["ngx.ssl.session"] = "it works on the SSL session of the current connection; call it in "
    .. "ssl_session_fetch_by_lua / ssl_session_store_by_lua",
  ["ngx.ssl.clienthello"] = "it works on the ClientHello of the current connection; call it in "
    .. "ssl_client_hello_by_lua",
  ["ngx.re"] = "ngx_lua's PCRE calls share the worker's regex cache, PCRE allocator and JIT stack without a "
    .. "lock; in a state use Lua patterns (string.find, string.gsub), LPeg or lrexlib, or call ngx.re in the "
    .. "request",
  ["ngx.req"] = ON_REQUEST,
  ["ngx.resp"] = ON_REQUEST,
  ["ngx.errlog"] = { keep = { raw_log = true, get_sys_filter_level = true },
    why = "it reads or changes what the worker's error log captures (lua_capture_error_log), which the "
      .. "event loop writes without a lock; call it in the request or a timer" },
  ["ngx.ssl"] = { keep = { cert_pem_to_der = true, priv_key_pem_to_der = true, parse_pem_cert = true,
    parse_pem_priv_key = true },
    why = "it works on the SSL connection of the current request; call it in ssl_certificate_by_lua" },
  ["ngx.ocsp"] = { keep = { get_ocsp_responder_from_der_chain = true, create_ocsp_request = true,
    validate_ocsp_response = true },
    why = "it sets the OCSP staple of the current SSL connection; call it in ssl_certificate_by_lua" },
  ["resty.core.request"] = ON_REQUEST,
  ["resty.core.response"] = ON_REQUEST,
  ["resty.core.var"] = ON_REQUEST,
  ["resty.core.ctx"] = ON_REQUEST,
  ["resty.core.exit"] = ON_REQUEST,
  ["resty.core.misc"] = ON_REQUEST,
  ["resty.core.ndk"] = ON_REQUEST,
  ["resty.core.param"] = ON_REQUEST,
  ["resty.core.phase"] = ON_REQUEST,
  ["resty.core.socket"] = "cosockets run on the worker's event loop; connect in the request and pass the data "
    .. "to the pool",
  ["resty.core.coroutine"] = "it makes coroutine.* the request's light threads; plain coroutines already work "
    .. "in a state",
}
MODULES["resty.core.regex"] = MODULES["ngx.re"]

local loaders = package.loaders
local searcher

-- loads `name` with the searchers after ours, then stubs what `keep` does not list
local function load_partial(name, spec)
  local here
  for i = 1, #loaders do
    if loaders[i] == searcher then here = i end
  end
  local msgs = {}
  for i = here + 1, #loaders do
    local loader = loaders[i](name)
    if type(loader) == "function" then
      return function(...)
        local m = loader(...)
        if m == nil then m = package.loaded[name] end
        if type(m) == "table" then
          for k, v in pairs(m) do
            if type(v) == "function" and not spec.keep[k] then
              local what = name .. "." .. tostring(k)
              m[k] = function() not_available(what, spec.why) end
            end
          end
        end
        return m
      end
    elseif type(loader) == "string" then
      msgs[#msgs + 1] = loader
    end
  end
  return concat(msgs)
end

-- after package.preload (a module preloaded on purpose wins), before the file searchers; raising
-- here, before require marks the module as being loaded, makes each require raise the same error
searcher = function(name)
  local spec = MODULES[name]
  if type(spec) == "string" then
    not_available("module '" .. name .. "'", spec)
  elseif spec then
    return load_partial(name, spec)
  elseif name == "resty.core" then
    -- its thread-safe parts are loaded above; what needs a request raises on ngx.X
    return function() return { version = require("resty.core.base").version } end
  end
  return nil
end
table.insert(loaders, 2, searcher)
