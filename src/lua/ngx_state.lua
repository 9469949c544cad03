-- The `ngx` of a pool state inside nginx, compiled into the library and run by
-- vmpool._ngx_state() (src/host/ngx_state_api.rs) with a table ngx_lua's own C functions have
-- filled: encode_args, decode_args, quote_sql_str, hmac_sha1, ngx.config and ngx.shared (the
-- worker's shared memory zones). This adds what lua-resty-core's FFI modules give (they resolve
-- in the worker process, where every pool state lives) and what needs no request:
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
--
-- What needs a request or the event loop raises "vmpool: ngx.X is not available in a pool state".
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

ngx.OK, ngx.ERROR, ngx.AGAIN, ngx.DONE, ngx.DECLINED = 0, -1, -2, -4, -5
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

-- the parts of ngx that need a request or the event loop
local UNAVAILABLE = {}
for _, name in ipairs {
  "say", "print", "echo", "flush", "eof", "exit", "exec", "redirect", "send_headers", "status", "header", "req",
  "resp", "var", "ctx", "arg", "location", "sleep", "timer", "socket", "thread", "semaphore", "on_abort",
  "is_subrequest", "headers_sent", "get_phase", "re", "run_worker_thread", "update_time", "ocsp", "balancer",
  "ssl", "pipe", "process",
} do
  UNAVAILABLE[name] = true
end

setmetatable(ngx, {
  __index = function(_, key)
    if UNAVAILABLE[key] then
      error("vmpool: ngx." .. tostring(key) .. " is not available in a pool state (it needs a request or the "
        .. "nginx event loop; call it in the request and pass the result to the pool)", 0)
    end
    return nil
  end,
})
