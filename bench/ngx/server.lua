-- The benchmark server of nginx.conf here, as bench/ngx/run.lua and instructions.lua start it:
-- the configuration filled in, and what each endpoint requests with which batch setting.
local H = require "spec.ngx.nginx"

local S = {}

-- endpoints that request another's path: vmpool_direct is /vmpool with batching off
local PATH = { vmpool_direct = "/vmpool" }
-- vmpool.ngx.configure{batch = ...} each vmpool endpoint runs with
local BATCH = { vmpool = "1", vmpool_direct = "0" }

--- nginx.conf with its @ROOT@, @PORT@, @CORE@ (vmpool states) and @THREADS@ (thread_pool threads).
function S.conf(port, core, threads)
  local text = assert(H.read_file(H.ROOT .. "/bench/ngx/nginx.conf"))
  local subst = { ROOT = H.ROOT, PORT = port, CORE = core, THREADS = threads }
  return (text:gsub("@(%u+)@", function(k) return tostring(assert(subst[k], k)) end))
end

--- The path an endpoint requests ("/vmpool" for vmpool_direct).
function S.path(endpoint)
  return PATH[endpoint] or ("/" .. endpoint)
end

--- Sets the batching the endpoint runs with (nothing for endpoints without vmpool).
function S.configure(port, endpoint, timeout)
  if BATCH[endpoint] then
    assert(H.get(port, "/configure?batch=" .. BATCH[endpoint], timeout) == 200)
  end
end

return S
