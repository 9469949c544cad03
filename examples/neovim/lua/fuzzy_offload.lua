-- A Neovim plugin module that ranks a list of strings against a query in a vmpool state instead
-- of on the editor's main loop: the editor keeps redrawing and reading keys while the pool works.
--
--   require("fuzzy_offload").setup { cpath = "<rock tree>/lib/lua/5.1/?.so" }
--   require("fuzzy_offload").rank("vmp", { "vmpool", "vim", "map" }, function(ranked, err) ... end)
local M = {}

local pool, vluv

-- Runs in the pool's states: plain Lua, no `vim` (a state is a Lua state of its own).
local RANK = [[
local function score(query, item)
  -- the characters of query, in order, in item: fewer gaps score higher
  local s, at = 0, 1
  for i = 1, #query do
    local found = item:find(query:sub(i, i), at, true)
    if not found then return nil end
    s = s - (found - at)
    at = found + 1
  end
  return s
end

function rank(query, items)
  local scored = {}
  for _, item in ipairs(items) do
    local s = score(query, item)
    if s then scored[#scored + 1] = { item = item, score = s } end
  end
  table.sort(scored, function(a, b) return a.score > b.score or (a.score == b.score and a.item < b.item) end)
  local ranked = {}
  for i, e in ipairs(scored) do ranked[i] = e.item end
  return ranked
end
]]

--- setup{ cpath = "...", core = n }: loads the rock (cpath: where vmpool.so is, as a
--- package.cpath pattern) and starts the pool; closes it when the editor exits.
function M.setup(opts)
  opts = opts or {}
  if opts.cpath then
    package.cpath = opts.cpath .. ";" .. package.cpath
  end
  local vmpool = require "vmpool"
  vluv = require "vmpool.luv" -- drives coroutines from vim.loop (vim.uv)
  pool = vmpool.new { core = opts.core or 2 }
  pool:compile("fuzzy", RANK)
  vim.api.nvim_create_autocmd("VimLeavePre", { callback = function() pool:close() end })
  return M
end

--- rank(query, items, on_done): ranks items in a pool state; on_done(ranked) or on_done(nil, err)
--- runs on the main loop (vim.schedule), where the whole vim.api is available.
function M.rank(query, items, on_done)
  vluv.spawn(function()
    -- the coroutine yields here; vim.loop resumes it when the call finished
    local ok, ranked = pcall(pool.co_invoke, pool, "fuzzy", "rank", query, items)
    vim.schedule(function()
      if ok then on_done(ranked) else on_done(nil, ranked) end
    end)
  end)
end

function M.pool()
  return pool
end

return M
